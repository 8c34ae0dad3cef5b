// paged_attention: attention of every row of a step (decoding rows and prompt chunks alike) over the paged KV
// cache, in fp32, for models on the AVX2 block path (attention/torch_backend.py calls it there).
//
// Why not torch's SDPA: its fp32 CPU kernels give a row bits that depend on the call it is in. A decoding row
// came out differently alone than in a batch of three (the flash kernel's split of the batch), and a prompt's
// last row differently as a one-token chunk over cached keys than inside its whole prompt. The 14-bit
// activations of the block linears then turn such a last-bit difference into a whole level now and then, so
// identical greedy requests got two answers depending on what shared their steps (issue 45).
//
// Here each (row, query head) is one fixed computation over exactly the row's own keys: scores as an 8-lane
// chain of FMAs over the head dimension from key `first` on, one exponential per key (a polynomial, the same
// in every lane), the probabilities summed in 8 lanes in key order, and the values weighted in key order. So a
// row's bits depend only on its query and its keys: not on how its prompt was cut into chunks, prefix-cache
// hits, nor which other rows share the step. Windows and soft-capping follow transformers as
// csrc/avx512/prompt_attention.cpp does.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common.h"
#include "paged_rows.h"

namespace mooncake_avx2 {
namespace {

template <class T>
void attend_all(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache, const int32_t* table,
                const int64_t* chunk, const std::vector<int64_t>& job_chunk, const std::vector<int64_t>& job_row,
                const Layout& s, at::Tensor& out) {
  const int64_t jobs = static_cast<int64_t>(job_chunk.size()) * s.kv_heads, group = s.heads / s.kv_heads;
  const float* qd = q.data_ptr<float>();
  const T* kc = k_cache.data_ptr<T>();
  const T* vc = v_cache.data_ptr<T>();
  float* od = out.data_ptr<float>();
  at::parallel_for(0, jobs, 1, [&](int64_t begin, int64_t end) {
    // Subnormal probabilities of a peaked row's far keys would each take a microcode assist; flushed to zero
    // (FTZ, DAZ) the same way in every call, so rows stay computed one way.
    const unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);
    std::vector<float> scores;
    for (int64_t job = begin; job < end; ++job) {
      const int64_t j = job / s.kv_heads, kvh = job % s.kv_heads, c = job_chunk[j], r = job_row[j];
      const int64_t token = chunk[3 * c] + r;
      const int64_t length = chunk[3 * c + 2] - chunk[3 * c + 1] + r + 1;  // cached keys, then the chunk's
      const int64_t first = s.window > 0 ? std::max<int64_t>(0, length - s.window) : 0;
      scores.resize(static_cast<size_t>(length - first + 8));
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t offset = (token * s.heads + h) * s.head_dim;
        attend_row(qd + offset, kc, vc, table + c * s.table_width, first, length, kvh, s, scores.data(), od + offset);
      }
    }
    _mm_setcsr(csr);
  });
}

// q fp32 [tokens, heads, head_dim]; caches [blocks, block_size, kv_heads, head_dim] in fp32, bf16 or fp16,
// holding every chunk's keys and values (this step's included); tables int32 [chunks, width]; chunks int64
// [chunks, 3]: (first token in q, tokens, context length after the chunk); a decoding row is a chunk of one.
// window: keys per row (0: all); softcap: the soft cap on scaled scores (0: none). Returns fp32 [tokens, heads,
// head_dim] with the chunks' rows filled (other rows zero).
at::Tensor paged_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                           const at::Tensor& tables, const at::Tensor& chunks, double scale, int64_t window,
                           double softcap) {
  const auto kind = k_cache.scalar_type();
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kFloat && q.is_contiguous(), "q must be contiguous fp32 [T, H, D]");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.is_contiguous() && v_cache.sizes() == k_cache.sizes() &&
                  v_cache.scalar_type() == kind && v_cache.is_contiguous() &&
                  (kind == at::kFloat || kind == at::kBFloat16 || kind == at::kHalf),
              "caches must be contiguous fp32, bf16 or fp16 [blocks, block_size, kv_heads, head_dim]");
  TORCH_CHECK(tables.dim() == 2 && tables.scalar_type() == at::kInt && tables.is_contiguous() && chunks.dim() == 2 &&
                  chunks.size(1) == 3 && chunks.scalar_type() == at::kLong && chunks.is_contiguous() &&
                  tables.size(0) == chunks.size(0),
              "tables int32 [chunks, width], chunks int64 [chunks, 3]");
  TORCH_CHECK(window >= 0 && softcap >= 0.0, "window and softcap must be >= 0 (0: none)");
  const Layout s{q.size(1),      k_cache.size(2), k_cache.size(3), k_cache.size(1), tables.size(1),
                 static_cast<float>(scale), window,     static_cast<float>(softcap)};
  TORCH_CHECK(q.size(2) == s.head_dim && s.head_dim % 8 == 0 && s.head_dim <= 8 * kMaxVectors,
              "head_dim must be a multiple of 8, at most 256");
  TORCH_CHECK(s.heads % s.kv_heads == 0, "query heads must be a multiple of KV heads");
  const int64_t num_chunks = chunks.size(0), tokens = q.size(0), blocks = k_cache.size(0);
  const auto* chunk = chunks.data_ptr<int64_t>();
  const auto* table = tables.data_ptr<int32_t>();
  std::vector<int64_t> job_chunk, job_row;  // jobs: (chunk, row, KV head)
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t first = chunk[3 * c], rows = chunk[3 * c + 1], context = chunk[3 * c + 2];
    TORCH_CHECK(first >= 0 && rows >= 1 && first + rows <= tokens && context >= rows &&
                    context <= s.table_width * s.block_size,
                "chunk outside q or longer than its table");
    for (int64_t b = 0; b < (context + s.block_size - 1) / s.block_size; ++b)
      TORCH_CHECK(table[c * s.table_width + b] >= 0 && table[c * s.table_width + b] < blocks,
                  "block table entry out of the cache");
    for (int64_t r = 0; r < rows; ++r) {
      job_chunk.push_back(c);
      job_row.push_back(r);
    }
  }
  at::Tensor out = at::zeros_like(q);
  if (kind == at::kFloat) attend_all<float>(q, k_cache, v_cache, table, chunk, job_chunk, job_row, s, out);
  if (kind == at::kBFloat16) attend_all<c10::BFloat16>(q, k_cache, v_cache, table, chunk, job_chunk, job_row, s, out);
  if (kind == at::kHalf) attend_all<c10::Half>(q, k_cache, v_cache, table, chunk, job_chunk, job_row, s, out);
  return out;
}

}  // namespace
}  // namespace mooncake_avx2

TORCH_LIBRARY_IMPL(mooncake_avx2, CPU, m) { m.impl("paged_attention", &mooncake_avx2::paged_attention); }
