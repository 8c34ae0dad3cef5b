// decode_layers: every decoder layer of a small decode batch (1 to max_rows sequences, one new token each) in
// one call, for a Llama-family model whose projections all read a GGUF's blocks (quantization/gguf/fused_layers.py): Q4_0/Q4_1
// or Q8_0 through the bf16 kernels, K-quants through the integer ones, as the module path reads each.
//
// At batch 1 a step is about 8 ms of weight reads and, through Python and the dispatcher, about 6 ms more
// of per-operator overhead over 30 layers x ~25 ops (docs/design/fused-decode.md). Here the whole layer stack
// is plain loops around the same Q4 kernels, with the same bf16 rounding points as the module path: RMSNorm
// in fp32 rounded to bf16 before the weight; every projection, the rotary products and sums, the residual
// adds, SiLU and the gate product rounded to bf16. Attention reads K/V in place through the block tables and
// accumulates in fp32, as CPU SDPA does for bf16 (only the summation order differs).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "bf16_lanes.h"
#include "kquant_integer.h"
#include "block_kernels.h"

namespace mooncake_avx512 {
namespace {

using bf16 = c10::BFloat16;

inline float round_bf16(float x) { return static_cast<float>(bf16(x)); }

inline const uint16_t* bits(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }

// Every width here (hidden size, head_dim, intermediate size) is a multiple of 16 (load16/store16 lanes);
// decode_layers checks it.
inline __m512 rounded(__m512 v) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(v)), 16));
}

// out = bf16(w * bf16(x * rsqrt(mean(x^2) + eps))), as RMSNorm in layers/linear.py.
void rms_norm(const bf16* x, const bf16* w, bf16* out, int64_t rows, int64_t n, float eps) {
  for (int64_t m = 0; m < rows; ++m) {
    const bf16* xm = x + m * n;
    __m512 sum = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
      const __m512 v = load16(xm + i);
      sum = _mm512_fmadd_ps(v, v, sum);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(_mm512_reduce_add_ps(sum) / n + eps));
    for (int64_t i = 0; i < n; i += 16)
      store16(out + m * n + i, _mm512_mul_ps(load16(w + i), rounded(_mm512_mul_ps(load16(xm + i), inv))));
  }
}

// One projection's matrices, stacked row-wise (a Q4_K_M file's fused QKV mixes Q4_K with Q6_K, for one).
// kind kDmBlocks: Q4 nibbles (uint8) or Q8_0 levels (int8) with (d, m) pairs; else a K-quant type id.
constexpr int64_t kDmBlocks = 0;

struct Part {
  const at::Tensor* weight;
  const at::Tensor* dm;
  int64_t kind;
};

struct Projection {
  std::vector<Part> parts;
  int64_t n = 0;  // output size: the parts' rows
};

// Scratch for one call: the permuted activations and the fp32 product of the widest matrix.
struct Scratch {
  std::vector<uint16_t> xp;
  std::vector<float> y;
};

// out[rows, n] = bf16(x[rows, k] @ W^T), each part as its op computes it (block_linear, kquant_linear's integer
// rows) and rounded to bf16 into its columns, as the module path's concatenation of the parts' outputs.
void project(const bf16* x, const Projection& projection, bf16* out, int64_t rows, int64_t k, bool amx,
             int64_t activations, Scratch& scratch) {
  bool permuted = false;
  IntegerActivations integer_x(bits(x), rows, k, activations);
  int64_t column = 0;
  for (const Part& part : projection.parts) {
    const int64_t n = part.weight->size(0);
    const auto* q = reinterpret_cast<const uint8_t*>(part.weight->data_ptr());
    float* y = scratch.y.data();
    if (part.kind == kDmBlocks) {
      if (!permuted) permute_x(bits(x), scratch.xp.data(), rows, k);
      permuted = true;
      const auto* dm = reinterpret_cast<const uint16_t*>(part.dm->data_ptr());
      if (part.weight->scalar_type() == at::kChar) {
        multiply<Q8Format>(scratch.xp.data(), q, dm, y, rows, k, n, amx);
      } else {
        multiply<Q4Format>(scratch.xp.data(), q, dm, y, rows, k, n, amx);
      }
    } else {
      integer_multiply(integer_x, q, part.kind, IntegerPath::kAuto, y, n);
    }
    for (int64_t m = 0; m < rows; ++m) {
      bf16* row = out + m * projection.n + column;
      const float* ym = y + m * n;
      int64_t i = 0;
      for (; i + 16 <= n; i += 16) store16(row + i, _mm512_loadu_ps(ym + i));
      for (; i < n; ++i) row[i] = bf16(ym[i]);
    }
    column += n;
  }
}

// The projections of every layer (qkv, o, gate_up, down), checked against the model's sizes: counts[p] parts
// of weights/dms/kinds each.
std::vector<Projection> projections(at::TensorList weights, at::TensorList dms, at::IntArrayRef kinds,
                                    at::IntArrayRef counts, int64_t layers, int64_t width, int64_t q_size,
                                    int64_t kv_size, int64_t inter, int64_t activations) {
  TORCH_CHECK(static_cast<int64_t>(counts.size()) == 4 * layers, "four projections per layer");
  TORCH_CHECK(dms.size() == weights.size() && kinds.size() == weights.size(), "one dm and kind per matrix");
  const int64_t sizes[4][2] = {{q_size + 2 * kv_size, width}, {width, q_size}, {2 * inter, width}, {width, inter}};
  std::vector<Projection> out(counts.size());
  size_t next = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    const int64_t n = sizes[p % 4][0], k = sizes[p % 4][1];
    TORCH_CHECK(counts[p] >= 1 && next + counts[p] <= weights.size(), "parts past the list of matrices");
    for (int64_t i = 0; i < counts[p]; ++i, ++next) {
      const at::Tensor& weight = weights[next];
      const int64_t kind = kinds[next];
      TORCH_CHECK(weight.dim() == 2 && weight.is_contiguous(), "matrices must be contiguous 2-D");
      if (kind == kDmBlocks) {
        const bool q8 = weight.scalar_type() == at::kChar;
        TORCH_CHECK((q8 || weight.scalar_type() == at::kByte) && weight.size(1) * (q8 ? 1 : 2) == k,
                    "Q4/Q8_0 levels must be uint8 (Q4) or int8 (Q8_0) matching the input size");
        TORCH_CHECK(dms[next].scalar_type() == kDmType && dms[next].is_contiguous() &&
                        dms[next].numel() == weight.size(0) * (k / 32) * 2,
                    "dm must hold a float16 (d, m) pair per block");
      } else {
        TORCH_CHECK(activations == kInt8 || activations == kInt16, "K-quant rows need int8 or int16 activations");
        checked_rows(weight, kind, k);
      }
      out[p].parts.push_back(Part{&weight, &dms[next], kind});
      out[p].n += weight.size(0);
    }
    TORCH_CHECK(out[p].n == n, "projection shapes do not match the model");
  }
  TORCH_CHECK(next == weights.size(), "matrices left over after the projections");
  return out;
}

// In place on [heads, d] of one token: x * cos + rotate_half(x) * sin, each product and the sum in bf16.
void rotate(bf16* x, const bf16* cos, const bf16* sin, int64_t heads, int64_t d) {
  const int64_t half = d / 2;
  const __m512 sign = _mm512_set1_ps(-1.0f);
  alignas(64) bf16 row[512];
  for (int64_t h = 0; h < heads; ++h) {
    bf16* v = x + h * d;
    std::copy(v, v + d, row);
    for (int64_t i = 0; i < d; i += 16) {
      const __m512 rotated =
          i < half ? _mm512_mul_ps(sign, load16(row + i + half)) : load16(row + i - half);
      const __m512 a = rounded(_mm512_mul_ps(load16(row + i), load16(cos + i)));
      const __m512 b = rounded(_mm512_mul_ps(rotated, load16(sin + i)));
      store16(v + i, _mm512_add_ps(a, b));
    }
  }
}

struct Shape {
  int64_t heads, kv_heads, head_dim, block_size;
  float scale;
};

// Each (row, head): softmax(q k^T * scale) v over the row's context, in fp32, K/V read through its blocks.
void attend(const bf16* q, const bf16* k_cache, const bf16* v_cache, const int32_t* tables, int64_t width,
            const int64_t* lengths, bf16* out, int64_t rows, const Shape& s) {
  const int64_t group = s.heads / s.kv_heads, d = s.head_dim;
  at::parallel_for(0, rows * s.heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    __m512 query[32], acc[32];  // head_dim <= 512
    const int64_t lanes = d / 16;
    for (int64_t job = begin; job < end; ++job) {
      const int64_t m = job / s.heads, h = job % s.heads, kvh = h / group, length = lengths[m];
      for (int64_t i = 0; i < lanes; ++i) query[i] = load16(q + (m * s.heads + h) * d + 16 * i);
      scores.resize(length);
      float top = -INFINITY;
      for (int64_t t = 0; t < length; ++t) {
        const int64_t slot = static_cast<int64_t>(tables[m * width + t / s.block_size]) * s.block_size +
                             t % s.block_size;
        const bf16* key = k_cache + (slot * s.kv_heads + kvh) * d;
        __m512 dot = _mm512_mul_ps(query[0], load16(key));
        for (int64_t i = 1; i < lanes; ++i) dot = _mm512_fmadd_ps(query[i], load16(key + 16 * i), dot);
        scores[t] = _mm512_reduce_add_ps(dot) * s.scale;
        top = std::max(top, scores[t]);
      }
      float total = 0;
      for (int64_t t = 0; t < length; ++t) total += scores[t] = std::exp(scores[t] - top);
      for (int64_t i = 0; i < lanes; ++i) acc[i] = _mm512_setzero_ps();
      for (int64_t t = 0; t < length; ++t) {
        const int64_t slot = static_cast<int64_t>(tables[m * width + t / s.block_size]) * s.block_size +
                             t % s.block_size;
        const bf16* value = v_cache + (slot * s.kv_heads + kvh) * d;
        const __m512 p = _mm512_set1_ps(scores[t] / total);
        for (int64_t i = 0; i < lanes; ++i) acc[i] = _mm512_fmadd_ps(p, load16(value + 16 * i), acc[i]);
      }
      for (int64_t i = 0; i < lanes; ++i) store16(out + (m * s.heads + h) * d + 16 * i, acc[i]);
    }
  });
}

void add_into(bf16* h, const bf16* delta, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) store16(h + i, _mm512_add_ps(load16(h + i), load16(delta + i)));
}

// One token per row: its id, its position (it sees its sequence's context up to there), its KV slot and its
// sequence's block table. norms: per layer (input, post-attention), then the final norm; weights/dms/kinds:
// the matrices of each layer's projections (qkv, o, gate_up, down), counts[p] for projection p. Returns the
// final-normed hidden states [rows, hidden].
at::Tensor decode_layers(const at::Tensor& token_ids, const at::Tensor& positions, const at::Tensor& embedding,
                         const at::Tensor& cos_table, const at::Tensor& sin_table, const at::Tensor& slots,
                         const at::Tensor& block_tables, at::TensorList k_caches, at::TensorList v_caches,
                         at::TensorList norms, at::TensorList weights, at::TensorList dms, at::IntArrayRef kinds,
                         at::IntArrayRef counts, int64_t num_heads, int64_t num_kv_heads, double eps, double scale,
                         bool amx, int64_t activations) {
  const int64_t layers = static_cast<int64_t>(k_caches.size());
  const int64_t rows = token_ids.numel(), width = embedding.size(1);
  TORCH_CHECK(rows >= 1 && rows <= max_rows(amx), "1 to ", max_rows(amx), " rows, got ", rows);
  TORCH_CHECK(layers >= 1 && v_caches.size() == k_caches.size() && norms.size() == 2 * k_caches.size() + 1,
              "per layer: one K and V cache, two norms; then the final norm");
  TORCH_CHECK(token_ids.scalar_type() == at::kLong && positions.scalar_type() == at::kLong &&
                  slots.scalar_type() == at::kLong && block_tables.scalar_type() == at::kInt &&
                  token_ids.is_contiguous() && positions.is_contiguous() && slots.is_contiguous() &&
                  block_tables.is_contiguous() && positions.numel() == rows && slots.numel() == rows &&
                  block_tables.dim() == 2 && block_tables.size(0) == rows,
              "token_ids, positions and slots int64 [rows], block_tables int32 [rows, width]");
  TORCH_CHECK(embedding.scalar_type() == at::kBFloat16 && embedding.is_contiguous(), "embedding must be bf16");
  const int64_t head_dim = k_caches[0].size(3);
  const int64_t q_size = num_heads * head_dim, kv_size = num_kv_heads * head_dim;
  TORCH_CHECK(static_cast<int64_t>(counts.size()) == 4 * layers && counts[0] >= 1 && counts[1] >= 1 &&
                  counts[2] >= 1 && counts[0] + counts[1] + counts[2] <= static_cast<int64_t>(weights.size()),
              "four projections per layer, each of one or more matrices");
  int64_t gate_up_rows = 0;  // layer 0's third projection: its parts follow qkv's and o's
  for (int64_t i = 0; i < counts[2]; ++i) gate_up_rows += weights[counts[0] + counts[1] + i].size(0);
  const int64_t inter = gate_up_rows / 2;
  TORCH_CHECK(width % 64 == 0 && head_dim % 32 == 0 && head_dim <= 512 && inter % 64 == 0 && inter / 16 <= kMaxDm &&
                  width / 16 <= kMaxDm,
              "hidden and intermediate sizes must be multiples of 64 up to 32768, head_dim of 32 up to 512");
  TORCH_CHECK(cos_table.scalar_type() == at::kBFloat16 && cos_table.is_contiguous() && sin_table.is_contiguous() &&
                  sin_table.sizes() == cos_table.sizes() && cos_table.size(1) == head_dim,
              "cos/sin tables must be contiguous bf16 [positions, head_dim]");
  for (int64_t l = 0; l < layers; ++l) {
    TORCH_CHECK(k_caches[l].scalar_type() == at::kBFloat16 && k_caches[l].is_contiguous() &&
                    v_caches[l].is_contiguous() && k_caches[l].sizes() == k_caches[0].sizes() &&
                    v_caches[l].sizes() == k_caches[0].sizes() && k_caches[l].size(2) == num_kv_heads,
                "caches must be contiguous bf16 [blocks, block_size, kv_heads, head_dim]");
  }
  const std::vector<Projection> layer_projections =
      projections(weights, dms, kinds, counts, layers, width, q_size, kv_size, inter, activations);
  for (const auto& norm : norms)
    TORCH_CHECK(norm.scalar_type() == at::kBFloat16 && norm.numel() == width, "norm weights must be bf16 [hidden]");
  const Shape shape{num_heads, num_kv_heads, head_dim, k_caches[0].size(1), static_cast<float>(scale)};
  const int64_t blocks_in_cache = k_caches[0].size(0);
  const auto* ids = token_ids.data_ptr<int64_t>();
  const auto* position = positions.data_ptr<int64_t>();
  const auto* slot = slots.data_ptr<int64_t>();
  const int64_t table_width = block_tables.size(1);
  std::vector<int64_t> length(rows);
  for (int64_t m = 0; m < rows; ++m) {
    TORCH_CHECK(ids[m] >= 0 && ids[m] < embedding.size(0), "token id out of the vocabulary");
    TORCH_CHECK(position[m] >= 0 && position[m] < cos_table.size(0), "position past the rotary table");
    TORCH_CHECK(slot[m] >= 0 && slot[m] < blocks_in_cache * shape.block_size, "slot out of the cache");
    length[m] = position[m] + 1;
    TORCH_CHECK(length[m] <= table_width * shape.block_size, "context longer than its table");
  }
  const auto* tables = block_tables.data_ptr<int32_t>();
  for (int64_t i = 0; i < rows * table_width; ++i)
    TORCH_CHECK(tables[i] >= 0 && tables[i] < blocks_in_cache, "block table entry out of the cache");

  at::Tensor out = at::empty({rows, width}, embedding.options());
  std::vector<bf16> h(rows * width);
  for (int64_t m = 0; m < rows; ++m) {
    const bf16* row = embedding.data_ptr<bf16>() + ids[m] * width;
    std::copy(row, row + width, h.data() + m * width);
  }
  const int64_t widest = std::max({q_size + 2 * kv_size, 2 * inter, width});
  std::vector<bf16> normed(rows * width), qkv(rows * (q_size + 2 * kv_size)), attn(rows * q_size);
  std::vector<bf16> delta(rows * width), gate_up(rows * 2 * inter), act(rows * inter), q(rows * q_size);
  Scratch scratch{std::vector<uint16_t>(rows * std::max({inter, width, q_size})), std::vector<float>(rows * widest)};
  // SiLU and the gate product through ATen's own kernels: the module path's exact bf16 results.
  const auto bf16_options = at::TensorOptions().dtype(at::kBFloat16);
  at::Tensor gate_up_view = at::from_blob(gate_up.data(), {rows, 2 * inter}, bf16_options);
  at::Tensor act_view = at::from_blob(act.data(), {rows, inter}, bf16_options);
  const float epsilon = static_cast<float>(eps);
  for (int64_t l = 0; l < layers; ++l) {
    auto* kc = k_caches[l].data_ptr<bf16>();
    auto* vc = v_caches[l].data_ptr<bf16>();
    rms_norm(h.data(), norms[2 * l].data_ptr<bf16>(), normed.data(), rows, width, epsilon);
    project(normed.data(), layer_projections[4 * l], qkv.data(), rows, width, amx, activations, scratch);
    for (int64_t m = 0; m < rows; ++m) {
      bf16* token = qkv.data() + m * (q_size + 2 * kv_size);
      // Q and K heads sit side by side: one rotary pass over both, as architectures/decoder.py does.
      rotate(token, cos_table.data_ptr<bf16>() + position[m] * head_dim,
             sin_table.data_ptr<bf16>() + position[m] * head_dim, num_heads + num_kv_heads, head_dim);
      std::copy(token, token + q_size, q.data() + m * q_size);
      std::copy(token + q_size, token + q_size + kv_size, kc + slot[m] * kv_size);
      std::copy(token + q_size + kv_size, token + q_size + 2 * kv_size, vc + slot[m] * kv_size);
    }
    attend(q.data(), kc, vc, tables, table_width, length.data(), attn.data(), rows, shape);
    project(attn.data(), layer_projections[4 * l + 1], delta.data(), rows, q_size, amx, activations, scratch);
    add_into(h.data(), delta.data(), rows * width);
    rms_norm(h.data(), norms[2 * l + 1].data_ptr<bf16>(), normed.data(), rows, width, epsilon);
    project(normed.data(), layer_projections[4 * l + 2], gate_up.data(), rows, width, amx, activations, scratch);
    at::mul_out(act_view, at::silu(gate_up_view.narrow(1, 0, inter)), gate_up_view.narrow(1, inter, inter));
    project(act.data(), layer_projections[4 * l + 3], delta.data(), rows, inter, amx, activations, scratch);
    add_into(h.data(), delta.data(), rows * width);
  }
  rms_norm(h.data(), norms[2 * layers].data_ptr<bf16>(), out.data_ptr<bf16>(), rows, width, epsilon);
  return out;
}

}  // namespace
}  // namespace mooncake_avx512

TORCH_LIBRARY_IMPL(mooncake_avx512, CPU, m) { m.impl("decode_layers", &mooncake_avx512::decode_layers); }
