// decode_layers (AVX2): every decoder layer of a decode batch (one new token per row) in one call, for an fp32
// Llama-family model whose projections all read a GGUF's blocks through this library's kernels
// (quantization/gguf/fused_avx2.py drives it). The AVX512 library's decode_layers does this for bf16.
//
// A single stream on these CPUs spent about 11 ms a token of a 1B model outside the block kernels: ~25
// PyTorch operators per layer, each a Python call and a dispatch (docs/design/fused-decode.md). Here a layer
// is plain loops around the very functions the module path's ops call, in its order and at its rounding
// points, so a row gets the module path's bits, not merely close ones:
// - projections: products.h, which block_linear and kquant_linear call (the activations quantized alike);
// - attention: paged_rows.h's attend_row, which paged_attention calls per (row, head), K/V read in place and
//   stored in the cache's dtype (fp32, bf16 or fp16) first, as write_kv's `.to(cache dtype)` rounds them;
// - RMSNorm's mean of squares and SiLU through ATen's own kernels on the same shapes (their reduction order
//   and exp are ATen's); everything else (rotary, residuals, scaling) is one fp32 operation per element,
//   which no order can change (the library is built with -ffp-contract=off: no FMA the module lacks).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "common.h"
#include "paged_rows.h"
#include "products.h"

namespace mooncake_avx2 {
namespace {

constexpr int64_t kDmBlocks = 0;  // a matrix of Q4_0/Q4_1 or Q8_0 levels with (d, m) pairs; else ggml's id

struct Part {
  const at::Tensor* weight;
  const at::Tensor* dm;
  int64_t kind;
};

struct Projection {
  std::vector<Part> parts;  // stacked row-wise (a Q4_K_M file's QKV mixes Q4_K and Q6_K)
  int64_t n = 0;
};

// out[rows, n] = x[rows, k] @ W^T, each part as its op computes it and copied into its columns, as the module
// path concatenates the parts' outputs. y: scratch for one part's product.
void project(const float* x, const Projection& p, float* out, int64_t rows, int64_t k, bool wide,
             std::vector<float>& y) {
  std::optional<Activations> per32, per256;  // each quantization made once, as equal as each op's own
  int64_t column = 0;
  for (const Part& part : p.parts) {
    const int64_t n = part.weight->size(0);
    float* target = p.parts.size() == 1 ? out : y.data();
    if (part.kind == kDmBlocks) {
      if (!per32) per32.emplace(x, rows, k, kGroup, wide);
      dm_product(*per32, *part.weight, *part.dm, target);
    } else {
      if (!per256) per256.emplace(x, rows, k, 256, wide);
      kquant_product(*per256, *part.weight, part.kind, target);
    }
    if (p.parts.size() > 1)
      for (int64_t m = 0; m < rows; ++m) std::copy(y.data() + m * n, y.data() + (m + 1) * n, out + m * p.n + column);
    column += n;
  }
}

// The projections of every layer (qkv, o, gate_up, down), counts[p] matrices each, checked against the sizes.
std::vector<Projection> projections(at::TensorList weights, at::TensorList dms, at::IntArrayRef kinds,
                                    at::IntArrayRef counts, int64_t layers, int64_t width, int64_t q_size,
                                    int64_t kv_size, int64_t inter) {
  TORCH_CHECK(static_cast<int64_t>(counts.size()) == 4 * layers, "four projections per layer");
  TORCH_CHECK(dms.size() == weights.size() && kinds.size() == weights.size(), "one dm and kind per matrix");
  const int64_t sizes[4][2] = {{q_size + 2 * kv_size, width}, {width, q_size}, {2 * inter, width}, {width, inter}};
  std::vector<Projection> out(counts.size());
  size_t next = 0;
  for (size_t p = 0; p < counts.size(); ++p) {
    const int64_t n = sizes[p % 4][0], k = sizes[p % 4][1];
    TORCH_CHECK(counts[p] >= 1 && next + counts[p] <= weights.size(), "parts past the list of matrices");
    for (int64_t i = 0; i < counts[p]; ++i, ++next) {
      const at::Tensor& w = weights[next];
      const int64_t kind = kinds[next];
      TORCH_CHECK(w.dim() == 2 && w.is_contiguous(), "matrices must be contiguous 2-D");
      if (kind == kDmBlocks) {
        const bool q8 = w.scalar_type() == at::kChar;
        TORCH_CHECK((q8 || w.scalar_type() == at::kByte) && w.size(1) * (q8 ? 1 : 2) == k,
                    "Q4/Q8_0 levels must be uint8 (Q4) or int8 (Q8_0) matching the input size");
        TORCH_CHECK(dms[next].scalar_type() == at::kHalf && dms[next].is_contiguous() && dms[next].dim() == 2 &&
                        dms[next].size(0) == w.size(0) && dms[next].size(1) == k / kGroup * 2,
                    "dm must hold a float16 (d, m) pair per block");
      } else {
        const int64_t bytes = kquant_bytes(kind);
        TORCH_CHECK(bytes != 0, "unsupported K-quant type ", kind);
        TORCH_CHECK(k % 256 == 0 && w.scalar_type() == at::kByte && w.size(1) == k / 256 * bytes,
                    "K-quant rows must be uint8 super-blocks of the input size, a multiple of 256");
      }
      out[p].parts.push_back(Part{&w, &dms[next], kind});
      out[p].n += w.size(0);
    }
    TORCH_CHECK(out[p].n == n, "projection shapes do not match the model");
  }
  TORCH_CHECK(next == weights.size(), "matrices left over after the projections");
  return out;
}

// out = w * (x * rsqrt(mean(x^2) + eps)), as layers/norms.py's RMSNorm in fp32: the mean by at::mean on the
// same [rows, n] shape (its reduction order), the rest one rounding per element as there.
void rms_norm(const float* x, const float* w, float* out, int64_t rows, int64_t n, float eps, float* squares) {
  for (int64_t i = 0; i < rows * n; ++i) squares[i] = x[i] * x[i];
  const at::Tensor mean = at::mean(at::from_blob(squares, {rows, n}, at::kFloat), {-1}, true);
  const float* means = mean.data_ptr<float>();
  for (int64_t m = 0; m < rows; ++m) {
    const float inverse = 1.0f / std::sqrt(means[m] + eps);
    for (int64_t i = 0; i < n; ++i) out[m * n + i] = w[i] * (x[m * n + i] * inverse);
  }
}

struct Shape {
  int64_t heads, kv_heads, head_dim;
};

// One row's Q and K heads in place (side by side, as architectures/decoder.py rotates them):
// x * cos + cat(-x2, x1) * sin, each product and the sum rounded once, as layers/rotary.py's apply_rotary.
void rotate(float* x, const float* cos, const float* sin, int64_t heads, int64_t d) {
  const int64_t half = d / 2;
  std::vector<float> row(d);
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + h * d;
    std::copy(v, v + d, row.begin());
    for (int64_t i = 0; i < d; ++i) {
      const float rotated = i < half ? -row[i + half] : row[i - half];
      const float a = row[i] * cos[i], b = rotated * sin[i];
      v[i] = a + b;
    }
  }
}

// Each (row, KV head) job: its group's query heads over keys 0..lengths[m]-1, as paged_attention's attend_all
// runs a chunk of one row (FTZ/DAZ on, the same layout).
template <class T>
void attend(const float* q, const T* kc, const T* vc, const int32_t* tables, const int64_t* lengths, float* out,
            int64_t rows, const Layout& s) {
  const int64_t group = s.heads / s.kv_heads;
  at::parallel_for(0, rows * s.kv_heads, 1, [&](int64_t begin, int64_t end) {
    const unsigned int csr = _mm_getcsr();
    _mm_setcsr(csr | 0x8040);
    std::vector<float> scores;
    for (int64_t job = begin; job < end; ++job) {
      const int64_t m = job / s.kv_heads, kvh = job % s.kv_heads;
      scores.resize(static_cast<size_t>(lengths[m] + 8));
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t offset = (m * s.heads + h) * s.head_dim;
        attend_row(q + offset, kc, vc, tables + m * s.table_width, 0, lengths[m], kvh, s, scores.data(), out + offset);
      }
    }
    _mm_setcsr(csr);
  });
}

struct Step {
  int64_t rows, width, inter, q_size, kv_size;
  const int64_t* slots;
  const int64_t* lengths;
  const int32_t* tables;
  const float* cos;
  const float* sin;
  float eps;
  bool wide;
};

// The layers in order over h [rows, width] (updated in place), K/V stored as T.
template <class T>
void run_layers(float* h, const Step& st, const Shape& shape, const Layout& layout, at::TensorList k_caches,
                at::TensorList v_caches, at::TensorList norms, const std::vector<Projection>& projections) {
  const int64_t rows = st.rows, width = st.width, inter = st.inter, d = shape.head_dim;
  const int64_t qkv_width = st.q_size + 2 * st.kv_size;
  std::vector<float> normed(rows * width), squares(rows * width), qkv(rows * qkv_width), q(rows * st.q_size);
  std::vector<float> attn(rows * st.q_size), delta(rows * width), gate_up(rows * 2 * inter), act(rows * inter);
  std::vector<float> y(rows * std::max({qkv_width, 2 * inter, width}));
  // SiLU and the gate product through ATen on views shaped as the module path's split: its exact results.
  const at::Tensor gate_up_view = at::from_blob(gate_up.data(), {rows, 2 * inter}, at::kFloat);
  at::Tensor act_view = at::from_blob(act.data(), {rows, inter}, at::kFloat);
  for (size_t l = 0; l < k_caches.size(); ++l) {
    T* kc = k_caches[l].data_ptr<T>();
    T* vc = v_caches[l].data_ptr<T>();
    rms_norm(h, norms[2 * l].data_ptr<float>(), normed.data(), rows, width, st.eps, squares.data());
    project(normed.data(), projections[4 * l], qkv.data(), rows, width, st.wide, y);
    for (int64_t m = 0; m < rows; ++m) {
      float* token = qkv.data() + m * qkv_width;
      rotate(token, st.cos + m * d, st.sin + m * d, shape.heads + shape.kv_heads, d);
      std::copy(token, token + st.q_size, q.data() + m * st.q_size);
      for (int64_t i = 0; i < st.kv_size; ++i) {  // rounded to the cache's dtype as write_kv's .to() does
        kc[st.slots[m] * st.kv_size + i] = static_cast<T>(token[st.q_size + i]);
        vc[st.slots[m] * st.kv_size + i] = static_cast<T>(token[st.q_size + st.kv_size + i]);
      }
    }
    attend(q.data(), kc, vc, st.tables, st.lengths, attn.data(), rows, layout);
    project(attn.data(), projections[4 * l + 1], delta.data(), rows, st.q_size, st.wide, y);
    for (int64_t i = 0; i < rows * width; ++i) h[i] = h[i] + delta[i];
    rms_norm(h, norms[2 * l + 1].data_ptr<float>(), normed.data(), rows, width, st.eps, squares.data());
    project(normed.data(), projections[4 * l + 2], gate_up.data(), rows, width, st.wide, y);
    at::mul_out(act_view, at::silu(gate_up_view.narrow(1, 0, inter)), gate_up_view.narrow(1, inter, inter));
    project(act.data(), projections[4 * l + 3], delta.data(), rows, inter, st.wide, y);
    for (int64_t i = 0; i < rows * width; ++i) h[i] = h[i] + delta[i];
  }
}

// hidden: fp32 [rows, width], the rows' token embeddings; positions int64 [rows] (a row sees its sequence's
// keys 0..position, its own written at `slots` first); cos/sin fp32 [rows, head_dim] at those positions;
// block_tables int32 [rows, width]. norms: per layer (input, post-attention) then the final norm; weights/
// dms/kinds: each layer's projections' matrices (qkv, o, gate_up, down), counts[p] for projection p. Returns
// the final-normed hidden states [rows, width].
at::Tensor decode_layers(const at::Tensor& hidden, const at::Tensor& positions, const at::Tensor& cos,
                         const at::Tensor& sin, const at::Tensor& slots, const at::Tensor& block_tables,
                         at::TensorList k_caches, at::TensorList v_caches, at::TensorList norms, at::TensorList weights,
                         at::TensorList dms, at::IntArrayRef kinds, at::IntArrayRef counts, int64_t num_heads,
                         int64_t num_kv_heads, double eps, double scale, bool wide) {
  const int64_t layers = static_cast<int64_t>(k_caches.size());
  TORCH_CHECK(hidden.dim() == 2 && hidden.scalar_type() == at::kFloat && hidden.is_contiguous(),
              "hidden must be contiguous fp32 [rows, hidden]");
  const int64_t rows = hidden.size(0), width = hidden.size(1);
  TORCH_CHECK(rows >= 1 && layers >= 1 && v_caches.size() == k_caches.size() &&
                  static_cast<int64_t>(norms.size()) == 2 * layers + 1,
              "per layer: one K and V cache, two norms; then the final norm");
  TORCH_CHECK(positions.scalar_type() == at::kLong && slots.scalar_type() == at::kLong &&
                  block_tables.scalar_type() == at::kInt && positions.is_contiguous() && slots.is_contiguous() &&
                  block_tables.is_contiguous() && positions.numel() == rows && slots.numel() == rows &&
                  block_tables.dim() == 2 && block_tables.size(0) == rows,
              "positions and slots int64 [rows], block_tables int32 [rows, width]");
  const at::Tensor& k0 = k_caches[0];
  TORCH_CHECK(k0.dim() == 4 && k0.size(2) == num_kv_heads && num_heads % num_kv_heads == 0,
              "caches must be [blocks, block_size, kv_heads, head_dim]");
  const auto cache_type = k0.scalar_type();
  TORCH_CHECK(cache_type == at::kFloat || cache_type == at::kBFloat16 || cache_type == at::kHalf,
              "caches must be fp32, bf16 or fp16");
  for (int64_t l = 0; l < layers; ++l)
    TORCH_CHECK(k_caches[l].scalar_type() == cache_type && v_caches[l].scalar_type() == cache_type &&
                    k_caches[l].is_contiguous() && v_caches[l].is_contiguous() &&
                    k_caches[l].sizes() == k0.sizes() && v_caches[l].sizes() == k0.sizes(),
                "every layer's caches must be contiguous and alike");
  const int64_t d = k0.size(3), q_size = num_heads * d, kv_size = num_kv_heads * d;
  TORCH_CHECK(d % 8 == 0 && d <= 8 * kMaxVectors && width % kGroup == 0,
              "head_dim must be a multiple of 8 up to 256, hidden size a multiple of 32");
  TORCH_CHECK(cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat && cos.is_contiguous() &&
                  sin.is_contiguous() && cos.dim() == 2 && cos.size(0) == rows && cos.size(1) == d &&
                  sin.sizes() == cos.sizes(),
              "cos/sin must be contiguous fp32 [rows, head_dim]");
  TORCH_CHECK(counts.size() >= 3 && counts[0] + counts[1] + counts[2] <= static_cast<int64_t>(weights.size()),
              "four projections per layer, each of one or more matrices");
  int64_t gate_up_rows = 0;  // layer 0's third projection: its parts follow qkv's and o's
  for (int64_t i = 0; i < counts[2]; ++i) gate_up_rows += weights[counts[0] + counts[1] + i].size(0);
  const int64_t inter = gate_up_rows / 2;
  TORCH_CHECK(inter % kGroup == 0, "the intermediate size must be a multiple of 32");
  const std::vector<Projection> layer_projections =
      projections(weights, dms, kinds, counts, layers, width, q_size, kv_size, inter);
  for (const auto& norm : norms)
    TORCH_CHECK(norm.scalar_type() == at::kFloat && norm.is_contiguous() && norm.numel() == width,
                "norm weights must be fp32 [hidden]");
  const int64_t block_size = k0.size(1), blocks_in_cache = k0.size(0), table_width = block_tables.size(1);
  const auto* position = positions.data_ptr<int64_t>();
  const auto* slot = slots.data_ptr<int64_t>();
  const auto* tables = block_tables.data_ptr<int32_t>();
  std::vector<int64_t> lengths(rows);
  for (int64_t m = 0; m < rows; ++m) {
    TORCH_CHECK(position[m] >= 0, "negative position");
    TORCH_CHECK(slot[m] >= 0 && slot[m] < blocks_in_cache * block_size, "slot out of the cache");
    lengths[m] = position[m] + 1;
    TORCH_CHECK(lengths[m] <= table_width * block_size, "context longer than its table");
    for (int64_t b = 0; b < (lengths[m] + block_size - 1) / block_size; ++b)
      TORCH_CHECK(tables[m * table_width + b] >= 0 && tables[m * table_width + b] < blocks_in_cache,
                  "block table entry out of the cache");
  }
  const Shape shape{num_heads, num_kv_heads, d};
  const Layout layout{num_heads, num_kv_heads, d, block_size, table_width, static_cast<float>(scale), 0, 0.0f};
  const Step step{rows,   width, inter, q_size, kv_size, slot, lengths.data(), tables, cos.data_ptr<float>(),
                  sin.data_ptr<float>(), static_cast<float>(eps), wide};
  at::Tensor h = hidden.clone();
  if (cache_type == at::kFloat)
    run_layers<float>(h.data_ptr<float>(), step, shape, layout, k_caches, v_caches, norms, layer_projections);
  if (cache_type == at::kBFloat16)
    run_layers<c10::BFloat16>(h.data_ptr<float>(), step, shape, layout, k_caches, v_caches, norms, layer_projections);
  if (cache_type == at::kHalf)
    run_layers<c10::Half>(h.data_ptr<float>(), step, shape, layout, k_caches, v_caches, norms, layer_projections);
  at::Tensor out = at::empty_like(h);
  std::vector<float> squares(rows * width);
  rms_norm(h.data_ptr<float>(), norms[2 * layers].data_ptr<float>(), out.data_ptr<float>(), rows, width,
           static_cast<float>(eps), squares.data());
  return out;
}

}  // namespace
}  // namespace mooncake_avx2

TORCH_LIBRARY_IMPL(mooncake_avx2, CPU, m) { m.impl("decode_layers", &mooncake_avx2::decode_layers); }
