// A GGUF's blocks multiplied as the file stores them on CPUs with AVX2 but without AVX512-BF16, where the
// model runs in fp32 (built apart from the AVX512 library, with -mavx2 -mfma -mf16c only).
//
// The activations are quantized once per call (common.h: per 32 values for the Q4/Q8_0 blocks, per 256 for
// the K-quants), rounded to nearest: to int8 as llama.cpp does on these CPUs, or to 14 bits (1/64 of its
// rounding error). Int8 ones meet the levels in vpmaddubsw (unsigned levels x signed activations; signed
// levels through vpsignb) and vpmaddwd, 14-bit ones as two int8 halves the same way or, for signed levels
// and several rows, as int16 against levels widened once (common.h's Path: the same int32 lanes); the
// Q4/Q8_0 blocks add one fp32 FMA per 32 weights, the K-quants one per super-block (kquants.h). Weights
// are read once per 64 activation rows; each weight row's blocks are expanded once per 4 rows, in L1.
//
// Types: Q4_0/Q4_1 and Q8_0 in the (levels, dm) layout of q4_decode.DecodeWeight; Q4_K, Q5_K, Q6_K and
// IQ4_XS as the file's super-blocks (KQuantWeight).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>

#include "common.h"
#include "kquants.h"
#include "products.h"

namespace mooncake_avx2 {

constexpr int64_t kRowBlock = 64;  // activation rows per pass over the weights

// Q4_0/Q4_1 (W = d * q + m, q 0..15) and Q8_0 (W = d * q, q int8) blocks of 32, in the (levels, dm) layout:
// per block one FMA of the integer dot times d and the activations' scale, and m times the scaled sum.
template <bool kQ8>
struct DmBlocks {
  const uint8_t* levels;
  const uint16_t* dm;
  __m256i level(int64_t b) const { return kQ8 ? load32(levels + 32 * b) : nibbles(levels + 16 * b); }
  __m256i dot(__m256i w, __m256i x) const {
    return _mm256_madd_epi16(kQ8 ? pairs_signed(w, x) : pairs_unsigned(w, x), _mm256_set1_epi16(1));
  }
};

template <bool kQ8, Path kPath, int kRows>
inline void dm_row(const DmBlocks<kQ8>& f, int64_t blocks, const Activations& a, int64_t r0, float* out) {
  __m256 acc[kRows];
  float offsets[kRows];
  for (int r = 0; r < kRows; ++r) {
    acc[r] = _mm256_setzero_ps();
    offsets[r] = 0.0f;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    // Every 64 bytes of levels (Q4: 4 blocks, Q8_0: 2) and of scales (16 blocks).
    if ((b & (kQ8 ? 1 : 3)) == 0) prefetch_ahead(f.levels + (kQ8 ? 32 : 16) * b, 1);
    if ((b & 15) == 0) prefetch_ahead(f.dm + 2 * b, 1);
    const __m256i w = f.level(b);
    const float d = _cvtsh_ss(f.dm[2 * b]), m = kQ8 ? 0.0f : _cvtsh_ss(f.dm[2 * b + 1]);
    __m256i halves[2];
    if constexpr (kPath == Path::kWords) expand_pairs<kQ8>(w, halves);
    for (int r = 0; r < kRows; ++r) {
      const int64_t at = (r0 + r) * a.blocks + b;
      __m256i dot;
      if constexpr (kPath == Path::kWords) {
        dot = pair_dot(halves, a.words.data() + at * kGroup);
      } else {
        dot = f.dot(w, load32(a.q.data() + at * kGroup));
        if constexpr (kPath == Path::kHalves)
          dot = _mm256_add_epi32(_mm256_slli_epi32(dot, 7), f.dot(w, load32(a.low.data() + at * kGroup)));
      }
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(d * a.d[at]), acc[r]);
      if (!kQ8) offsets[r] += m * a.dsum[at];
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = hsum(acc[r]) + offsets[r];
}

// Every output row (in parallel) against every activation row, 64 activation rows per pass over the
// weights and 4 per pass over a weight row. `rows(o, r0, n, out)` computes output o for rows r0..r0+n.
template <class Rows>
void multiply(const Activations& a, int64_t out_features, Rows rows, float* y) {
  for (int64_t first = 0; first < a.rows; first += kRowBlock) {
    const int64_t last = std::min(first + kRowBlock, a.rows);
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < out_features; ++o) {
      float out[4];
      for (int64_t r0 = first; r0 < last; r0 += 4) {
        const int n = static_cast<int>(std::min<int64_t>(4, last - r0));
        rows(o, r0, n, out);
        for (int r = 0; r < n; ++r) y[(r0 + r) * out_features + o] = out[r];
      }
    }
  }
}

// call(n) with the row count n (1..4) as a constant, so the accumulators stay in registers.
#define MOONCAKE_BY_ROWS(n, call) \
  switch (n) {                     \
    case 4: call(4); break;        \
    case 3: call(3); break;        \
    case 2: call(2); break;        \
    default: call(1); break;       \
  }

at::Tensor finish(at::Tensor y, const c10::optional<at::Tensor>& bias, at::ScalarType dtype) {
  if (bias.has_value() && bias->defined()) y.add_(bias->to(at::kFloat));
  return y.to(dtype);
}

at::Tensor flat_input(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) % kGroup == 0, "x must be [rows, in] with in a multiple of 32");
  return x.to(at::kFloat).contiguous();
}

// call(P) with a's path for levels of this signedness as the constant P.
#define MOONCAKE_BY_PATH(a, signed_levels, call)           \
  switch ((a).path(signed_levels)) {                       \
    case Path::kWords: call(Path::kWords); break;          \
    case Path::kHalves: call(Path::kHalves); break;        \
    default: call(Path::kInt8); break;                     \
  }

template <bool kQ8, Path kPath>
void dm_rows(const Activations& a, const uint8_t* base, int64_t row_bytes, const uint16_t* pairs, int64_t row_pairs,
             int64_t out_features, float* y) {
  const int64_t blocks = a.k / kGroup;
  multiply(a, out_features, [&](int64_t o, int64_t r0, int n, float* out) {
    const DmBlocks<kQ8> f{base + o * row_bytes, pairs + o * row_pairs};
#define MOONCAKE_CALL(rows) dm_row<kQ8, kPath, rows>(f, blocks, a, r0, out)
    MOONCAKE_BY_ROWS(n, MOONCAKE_CALL)
#undef MOONCAKE_CALL
  }, y);
}

void dm_product(const Activations& a, const at::Tensor& levels, const at::Tensor& dm, float* y) {
  const auto* base = static_cast<const uint8_t*>(levels.data_ptr());
  const auto* pairs = reinterpret_cast<const uint16_t*>(dm.data_ptr<at::Half>());
  const int64_t row_bytes = levels.size(1), row_pairs = dm.size(1), out_features = levels.size(0);
#define MOONCAKE_Q8(path) dm_rows<true, path>(a, base, row_bytes, pairs, row_pairs, out_features, y)
#define MOONCAKE_Q4(path) dm_rows<false, path>(a, base, row_bytes, pairs, row_pairs, out_features, y)
  if (levels.scalar_type() == at::kChar) {
    MOONCAKE_BY_PATH(a, true, MOONCAKE_Q8)
  } else {
    MOONCAKE_BY_PATH(a, false, MOONCAKE_Q4)
  }
#undef MOONCAKE_Q8
#undef MOONCAKE_Q4
}

// (levels, dm) blocks: uint8 nibbles [out, in / 2] (Q4_0/Q4_1) or int8 levels [out, in] (Q8_0).
at::Tensor block_linear(const at::Tensor& x, const at::Tensor& levels, const at::Tensor& dm,
                        const c10::optional<at::Tensor>& bias, bool wide) {
  const at::Tensor xf = flat_input(x);
  const int64_t k = xf.size(1), out_features = levels.size(0);
  const bool q8 = levels.scalar_type() == at::kChar;
  TORCH_CHECK(levels.is_contiguous() && dm.is_contiguous() && dm.scalar_type() == at::kHalf, "bad block layout");
  TORCH_CHECK(levels.size(1) == (q8 ? k : k / 2) && dm.size(0) == out_features && dm.size(1) == k / kGroup * 2,
              "blocks do not match x");
  const Activations a(xf.data_ptr<float>(), xf.size(0), k, kGroup, wide);
  at::Tensor y = at::empty({xf.size(0), out_features}, xf.options());
  dm_product(a, levels, dm, y.data_ptr<float>());
  return finish(y, bias, x.scalar_type());
}

template <class F, Path kPath>
void kquant_rows(const Activations& a, const at::Tensor& raw, float* y) {
  const auto* base = raw.data_ptr<uint8_t>();
  const int64_t row_bytes = raw.size(1), blocks = a.k / 256;
  multiply(a, raw.size(0), [&](int64_t o, int64_t r0, int n, float* out) {
    const uint8_t* row = base + o * row_bytes;
#define MOONCAKE_CALL(rows) super_row<F, kPath, rows>(row, blocks, a, r0, out)
    MOONCAKE_BY_ROWS(n, MOONCAKE_CALL)
#undef MOONCAKE_CALL
  }, y);
}

int64_t kquant_bytes(int64_t kind) {
  return kind == 12 ? 144 : kind == 13 ? 176 : kind == 14 ? 210 : kind == 23 ? 136 : 0;
}

template <class F>
void kquant_type(const Activations& a, const at::Tensor& raw, float* y) {
#define MOONCAKE_CALL(path) kquant_rows<F, path>(a, raw, y)
  MOONCAKE_BY_PATH(a, F::kSigned, MOONCAKE_CALL)
#undef MOONCAKE_CALL
}

void kquant_product(const Activations& a, const at::Tensor& raw, int64_t kind, float* y) {
  switch (kind) {
    case 12: kquant_type<K4Super<false>>(a, raw, y); break;
    case 13: kquant_type<K4Super<true>>(a, raw, y); break;
    case 14: kquant_type<Q6Super>(a, raw, y); break;
    default: kquant_type<IQ4XSSuper>(a, raw, y); break;
  }
}

// K-quant super-blocks as the file stores them: raw [out, in / 256 * bytes], kind ggml's type id.
at::Tensor kquant_linear(const at::Tensor& x, const at::Tensor& raw, int64_t kind,
                         const c10::optional<at::Tensor>& bias, bool wide) {
  const at::Tensor xf = flat_input(x);
  const int64_t k = xf.size(1);
  TORCH_CHECK(raw.is_contiguous() && raw.scalar_type() == at::kByte && k % 256 == 0, "bad super-block layout");
  const int64_t bytes = kquant_bytes(kind);
  TORCH_CHECK(bytes != 0, "unsupported K-quant type ", kind);
  TORCH_CHECK(raw.size(1) == k / 256 * bytes, "super-blocks do not match x");
  const Activations a(xf.data_ptr<float>(), xf.size(0), k, 256, wide);
  at::Tensor y = at::empty({xf.size(0), raw.size(0)}, xf.options());
  kquant_product(a, raw, kind, y.data_ptr<float>());
  return finish(y, bias, x.scalar_type());
}

// The activations as the kernels quantize them (levels times scales), for tests and the load-time check.
at::Tensor quantized_input(const at::Tensor& x, int64_t block, bool wide) {
  const at::Tensor xf = flat_input(x);
  TORCH_CHECK((block == kGroup || block == 256) && xf.size(1) % block == 0, "block must be 32 or 256 and divide in");
  const Activations a(xf.data_ptr<float>(), xf.size(0), xf.size(1), block, wide);
  at::Tensor out = at::empty_like(xf);
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < xf.numel(); ++i) o[i] = a.value(i);
  return out;
}

}  // namespace mooncake_avx2

TORCH_LIBRARY_IMPL(mooncake_avx2, CPU, m) {
  m.impl("block_linear", &mooncake_avx2::block_linear);
  m.impl("kquant_linear", &mooncake_avx2::kquant_linear);
  m.impl("quantized_input", &mooncake_avx2::quantized_input);
}
