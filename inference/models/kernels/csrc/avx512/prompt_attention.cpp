// prompt_attention: causal attention of prompt chunks over the paged KV cache, bf16 on AVX512-BF16 CPUs
// (attention/torch_backend.py uses it for every prompt chunk when this library is loaded).
//
// Why not torch's SDPA: a wave of short chunks over a long cached prefix (16 chat prompts of ~25 tokens after
// a 400-token system prompt) is one SDPA call per chunk and layer, ~650 us each, mostly set-up, plus a
// gather of the chunk's context; here it is one call per layer that reads K/V in place.
//
// Each (row, query head) is computed one way whatever chunk or step it comes in: its scores are a fixed
// chain of bf16 pair products over the head dimension (vdpbf16ps, accumulated in fp32) for key tiles aligned
// to absolute positions, softmax in fp32 over exactly the row's own keys, and the weighted sum of values in
// key order. Rows are grouped into jobs only to share the keys' loads. So a prompt's attention rows do not
// depend on how the prompt was cut into chunks (prefix-cache hits, a latency budget's split) nor on which
// other prompts share the step.
//
// Sliding windows and logit soft-capping (Mistral, Gemma 2) follow transformers: a row at position p sees keys
// (p - window, p], and scaled scores s become softcap * tanh(s / softcap) before the softmax. A window only
// narrows which keys a row reads; the tiles stay aligned to absolute positions and every other key's
// probability is an exact zero, so rows stay independent of the cut and the company here too.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "bf16_lanes.h"

namespace mooncake_avx512 {
namespace {

using bf16 = c10::BFloat16;

constexpr int64_t kTile = 16;      // keys per tile: one zmm of fp32 scores
constexpr int64_t kJobRows = 8;    // rows of one chunk per job, sharing each key tile's transpose
constexpr int64_t kScoreGroup = 8; // (row, head) pairs whose score chains interleave
constexpr int64_t kMaxPairs = 64;  // head_dim / 2 up to 128

// e^x for x <= 0 (about 1 ulp): x = n ln2 + r, |r| <= ln2/2, a degree-7 polynomial in r, scaled by 2^n.
inline __m512 exp_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // e^-104 is below the smallest subnormal
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// In place: rows[i] (16 dwords each) become the columns. Four butterfly stages of block swaps (8, 4, 2, 1).
inline void transpose16(__m512i* rows) {
  for (int s = 8; s >= 1; s /= 2) {
    alignas(64) int32_t lo[16], hi[16];
    for (int c = 0; c < 16; ++c) {
      lo[c] = (c & s) ? 16 + c - s : c;
      hi[c] = (c & s) ? 16 + c : c + s;
    }
    const __m512i lo_idx = _mm512_load_si512(lo), hi_idx = _mm512_load_si512(hi);
    for (int i = 0; i < 16; ++i) {
      if (i & s) continue;
      const __m512i a = rows[i], b = rows[i + s];
      rows[i] = _mm512_permutex2var_epi32(a, lo_idx, b);
      rows[i + s] = _mm512_permutex2var_epi32(a, hi_idx, b);
    }
  }
}

struct Layout {
  int64_t heads, kv_heads, head_dim, block_size, table_width;
  float scale;
  int64_t window;  // 0: none
  float softcap;   // 0: none
};

// tanh(x) = sign(x) (1 - e) / (1 + e) with e = e^-2|x| in (0, 1]: no overflow at either end.
inline __m512 tanh_ps(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = exp_nonpositive(_mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(-2.0f)));
  const __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN));
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sign));
}

// The scaled scores of one tile, soft-capped where the model says so.
inline __m512 finish_scores(__m512 dots, const Layout& s) {
  const __m512 scaled = _mm512_mul_ps(dots, _mm512_set1_ps(s.scale));
  if (s.softcap == 0.0f) return scaled;
  const __m512 cap = _mm512_set1_ps(s.softcap);
  return _mm512_mul_ps(cap, tanh_ps(_mm512_div_ps(scaled, cap)));
}

// Lanes [lo, hi) of the tile whose first column is t.
inline __mmask16 lanes(int64_t t, int64_t lo, int64_t hi) {
  const int64_t from = std::clamp<int64_t>(lo - t, 0, kTile), to = std::clamp<int64_t>(hi - t, 0, kTile);
  return static_cast<__mmask16>(((1u << to) - 1) & ~((1u << from) - 1));
}

// Scratch of one thread: a job's key slots, the scores of its (row, head) pairs (then their probabilities),
// and one key tile as bf16 pairs by lane.
struct Scratch {
  std::vector<int64_t> slots;
  std::vector<float> scores;
  std::vector<float> inverse;
  alignas(64) __m512i keys[kMaxPairs];
  alignas(64) int32_t zero_query[kMaxPairs] = {};
};

// The loops below run whole groups (a fixed count, so the compiler keeps every accumulator in a register):
// pairs past the job's last one read a zero query and zero probabilities, and are never stored.
constexpr int64_t kSpare = 24;

// Keys [first, first + 16) of one KV head as pairs of dimensions: keys[p] lane j = dims (2p, 2p+1) of key
// first + j; keys at or past `end` are zero.
template <int64_t Lanes>
void load_key_tile(const bf16* k_cache, const int64_t* slots, int64_t first, int64_t end, int64_t kvh,
                   const Layout& s, __m512i* keys) {
  for (int64_t half = 0; half < 8 * Lanes; half += 16) {
    __m512i rows[16];
    for (int64_t j = 0; j < kTile; ++j)
      rows[j] = first + j < end ? _mm512_loadu_si512(k_cache + (slots[first + j] * s.kv_heads + kvh) * s.head_dim + 2 * half)
                                : _mm512_setzero_si512();
    transpose16(rows);
    for (int64_t p = 0; p < 16; ++p) keys[half + p] = rows[p];
  }
}

// One job: rows [0, rows) of a chunk whose row i sees keys [firsts[i], lengths[i]), the query heads of KV head
// kvh. q/out are [tokens, heads, head_dim] at the job's first row. Lanes = head_dim / 16. Score columns start
// at key `begin`, the job's first visible key rounded down to a tile.
template <int64_t Lanes>
void attend_job(const bf16* q, const bf16* k_cache, const bf16* v_cache, const int32_t* table, const int64_t* lengths,
                const int64_t* firsts, int64_t rows, int64_t kvh, const Layout& s, bf16* out, Scratch& scratch) {
  constexpr int64_t kDimPairs = 8 * Lanes, kValueGroup = 24 / Lanes;
  const int64_t group = s.heads / s.kv_heads, pairs_total = rows * group, d = s.head_dim;
  const int64_t end = lengths[rows - 1];  // rows are consecutive positions: the last sees the most
  const int64_t begin = firsts[0] / kTile * kTile;  // and the first sees the oldest keys
  const int64_t padded = (end - begin + kTile - 1) / kTile * kTile;
  scratch.slots.resize(end);
  for (int64_t t = begin; t < end; ++t)
    scratch.slots[t] = static_cast<int64_t>(table[t / s.block_size]) * s.block_size + t % s.block_size;
  const int64_t* slots = scratch.slots.data();
  scratch.scores.resize((pairs_total + kSpare) * padded);
  scratch.inverse.resize(pairs_total);
  float* scores = scratch.scores.data();
  auto offset = [&](int64_t pair) { return ((pair / group) * s.heads + kvh * group + pair % group) * d; };
  auto query = [&](int64_t pair) {
    return pair < pairs_total ? reinterpret_cast<const int32_t*>(q + offset(pair)) : scratch.zero_query;
  };

  for (int64_t first = begin; first < end; first += kTile) {
    load_key_tile<Lanes>(k_cache, slots, first, end, kvh, s, scratch.keys);
    for (int64_t g0 = 0; g0 < pairs_total; g0 += kScoreGroup) {
      __m512 acc[kScoreGroup];
      const int32_t* qs[kScoreGroup];
      for (int64_t r = 0; r < kScoreGroup; ++r) {
        acc[r] = _mm512_setzero_ps();
        qs[r] = query(g0 + r);
      }
      for (int64_t p = 0; p < kDimPairs; ++p) {
        const __m512bh k = (__m512bh)scratch.keys[p];
        for (int64_t r = 0; r < kScoreGroup; ++r)
          acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_set1_epi32(qs[r][p]), k);
      }
      for (int64_t r = 0; r < kScoreGroup; ++r)
        _mm512_storeu_ps(scores + (g0 + r) * padded + (first - begin), finish_scores(acc[r], s));
    }
  }

  // Softmax over each pair's own keys: probabilities replace the scores, zero outside the pair's keys and
  // for the spare pairs. Columns are key - begin.
  std::fill(scores + pairs_total * padded, scores + (pairs_total + kSpare) * padded, 0.0f);
  for (int64_t pair = 0; pair < pairs_total; ++pair) {
    float* row = scores + pair * padded;
    const int64_t lo = firsts[pair / group] - begin, length = lengths[pair / group] - begin;
    __m512 top = _mm512_set1_ps(-INFINITY);
    for (int64_t t = lo / kTile * kTile; t < length; t += kTile)
      top = _mm512_mask_max_ps(top, lanes(t, lo, length), top, _mm512_loadu_ps(row + t));
    const __m512 peak = _mm512_set1_ps(_mm512_reduce_max_ps(top));
    __m512 total = _mm512_setzero_ps();
    for (int64_t t = 0; t < padded; t += kTile) {
      const __mmask16 valid = lanes(t, lo, length);
      const __m512 e = _mm512_maskz_mov_ps(valid, exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(row + t), peak)));
      _mm512_storeu_ps(row + t, e);
      total = _mm512_add_ps(total, e);
    }
    scratch.inverse[pair] = 1.0f / _mm512_reduce_add_ps(total);
  }

  // out = (probabilities @ values) / total, keys in order; a zero probability adds exactly nothing.
  for (int64_t g0 = 0; g0 < pairs_total; g0 += kValueGroup) {
    __m512 acc[kValueGroup][Lanes];
    for (int64_t r = 0; r < kValueGroup; ++r)
      for (int64_t i = 0; i < Lanes; ++i) acc[r][i] = _mm512_setzero_ps();
    const int64_t group_begin = firsts[g0 / group];
    const int64_t group_end = lengths[(std::min(g0 + kValueGroup, pairs_total) - 1) / group];
    const float* p0 = scores + g0 * padded;
    for (int64_t t = group_begin; t < group_end; ++t) {
      const bf16* value = v_cache + (slots[t] * s.kv_heads + kvh) * d;
      __m512 v[Lanes];
      for (int64_t i = 0; i < Lanes; ++i) v[i] = load16(value + 16 * i);
      for (int64_t r = 0; r < kValueGroup; ++r) {
        const __m512 p = _mm512_set1_ps(p0[r * padded + (t - begin)]);
        for (int64_t i = 0; i < Lanes; ++i) acc[r][i] = _mm512_fmadd_ps(p, v[i], acc[r][i]);
      }
    }
    for (int64_t r = 0; r < kValueGroup && g0 + r < pairs_total; ++r) {
      bf16* dst = out + offset(g0 + r);
      const __m512 scale = _mm512_set1_ps(scratch.inverse[g0 + r]);
      for (int64_t i = 0; i < Lanes; ++i) store16(dst + 16 * i, _mm512_mul_ps(acc[r][i], scale));
    }
  }
}

// q [tokens, heads, head_dim] bf16; caches [blocks, block_size, kv_heads, head_dim] bf16 holding every
// chunk's keys and values (this step's included); tables int32 [chunks, width]; chunks int64 [chunks, 3]:
// (first token in q, tokens, context length after the chunk). window: keys per row (0: all); softcap: the
// soft cap on scaled scores (0: none). Returns [tokens, heads, head_dim] with the chunks' rows filled (other
// rows zero).
at::Tensor prompt_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& tables, const at::Tensor& chunks, double scale, int64_t window,
                            double softcap) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kBFloat16 && q.is_contiguous(), "q must be contiguous bf16 [T, H, D]");
  TORCH_CHECK(k_cache.dim() == 4 && k_cache.scalar_type() == at::kBFloat16 && k_cache.is_contiguous() &&
                  v_cache.sizes() == k_cache.sizes() && v_cache.scalar_type() == at::kBFloat16 && v_cache.is_contiguous(),
              "caches must be contiguous bf16 [blocks, block_size, kv_heads, head_dim]");
  TORCH_CHECK(tables.dim() == 2 && tables.scalar_type() == at::kInt && tables.is_contiguous() && chunks.dim() == 2 &&
                  chunks.size(1) == 3 && chunks.scalar_type() == at::kLong && chunks.is_contiguous() &&
                  tables.size(0) == chunks.size(0),
              "tables int32 [chunks, width], chunks int64 [chunks, 3]");
  TORCH_CHECK(window >= 0 && softcap >= 0.0, "window and softcap must be >= 0 (0: none)");
  const Layout s{q.size(1),      k_cache.size(2), k_cache.size(3), k_cache.size(1), tables.size(1),
                 static_cast<float>(scale), window,     static_cast<float>(softcap)};
  TORCH_CHECK(q.size(2) == s.head_dim && (s.head_dim == 32 || s.head_dim == 64 || s.head_dim == 128),
              "head_dim must be 32, 64 or 128");
  TORCH_CHECK(s.heads % s.kv_heads == 0, "query heads must be a multiple of KV heads");
  const int64_t num_chunks = chunks.size(0), tokens = q.size(0), blocks = k_cache.size(0);
  const auto* chunk = chunks.data_ptr<int64_t>();
  const auto* table = tables.data_ptr<int32_t>();
  for (int64_t c = 0; c < num_chunks; ++c) {
    const int64_t first = chunk[3 * c], rows = chunk[3 * c + 1], context = chunk[3 * c + 2];
    TORCH_CHECK(first >= 0 && rows >= 1 && first + rows <= tokens && context >= rows &&
                    context <= s.table_width * s.block_size,
                "chunk outside q or longer than its table");
    for (int64_t b = 0; b < (context + s.block_size - 1) / s.block_size; ++b)
      TORCH_CHECK(table[c * s.table_width + b] >= 0 && table[c * s.table_width + b] < blocks,
                  "block table entry out of the cache");
  }
  at::Tensor out = at::zeros_like(q);
  // Jobs: (chunk, group of up to kJobRows rows, KV head).
  std::vector<int64_t> job_chunk, job_row;
  for (int64_t c = 0; c < num_chunks; ++c)
    for (int64_t r = 0; r < chunk[3 * c + 1]; r += kJobRows) {
      job_chunk.push_back(c);
      job_row.push_back(r);
    }
  const int64_t jobs = static_cast<int64_t>(job_chunk.size()) * s.kv_heads;
  const bf16* qd = q.data_ptr<bf16>();
  const bf16* kc = k_cache.data_ptr<bf16>();
  const bf16* vc = v_cache.data_ptr<bf16>();
  bf16* od = out.data_ptr<bf16>();
  at::parallel_for(0, jobs, 1, [&](int64_t begin, int64_t end) {
    // Subnormals flush to zero (FTZ and DAZ) in this thread while it works: a peaked row's far keys get
    // probabilities below 1e-38, and each multiply-add with such an operand took a microcode assist (a
    // 1000-token prompt with peaked scores ran 10x slower: docs/design/prompt-attention.md). Each row is still
    // computed one way, whatever its chunk.
    const unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);
    Scratch scratch;
    int64_t lengths[kJobRows], firsts[kJobRows];
    for (int64_t job = begin; job < end; ++job) {
      const int64_t j = job / s.kv_heads, kvh = job % s.kv_heads, c = job_chunk[j], r0 = job_row[j];
      const int64_t first = chunk[3 * c], rows = std::min(kJobRows, chunk[3 * c + 1] - r0);
      const int64_t start = chunk[3 * c + 2] - chunk[3 * c + 1];  // cached tokens before the chunk
      for (int64_t i = 0; i < rows; ++i) {
        lengths[i] = start + r0 + i + 1;
        firsts[i] = s.window > 0 ? std::max<int64_t>(0, lengths[i] - s.window) : 0;
      }
      const int64_t token = first + r0;
      const bf16* qt = qd + token * s.heads * s.head_dim;
      bf16* ot = od + token * s.heads * s.head_dim;
      const int32_t* tc = table + c * s.table_width;
      if (s.head_dim == 32) attend_job<2>(qt, kc, vc, tc, lengths, firsts, rows, kvh, s, ot, scratch);
      if (s.head_dim == 64) attend_job<4>(qt, kc, vc, tc, lengths, firsts, rows, kvh, s, ot, scratch);
      if (s.head_dim == 128) attend_job<8>(qt, kc, vc, tc, lengths, firsts, rows, kvh, s, ot, scratch);
    }
    _mm_setcsr(csr);
  });
  return out;
}

}  // namespace
}  // namespace mooncake_avx512

TORCH_LIBRARY_IMPL(mooncake_avx512, CPU, m) { m.impl("prompt_attention", &mooncake_avx512::prompt_attention); }
