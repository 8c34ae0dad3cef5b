// A GGUF's blocks multiplied as the file stores them on CPUs with AVX2 but without AVX512-BF16, where the
// model runs in fp32 (built apart from the AVX512 library, with -mavx2 -mfma -mf16c only).
//
// The activations are quantized once per call per 32 values, rounded to nearest: to int8 (scale amax / 127)
// as llama.cpp does for these CPUs, or to 14 bits (amax / 8191) as two 7-bit halves, each taking the int8
// path (twice its multiplies, for about 1/64 of its rounding error). Each 32 weights' levels meet them in
// vpmaddubsw (unsigned levels x signed activations; signed levels through vpsignb) and vpmaddwd, and one fp32
// FMA per 32 adds the pair's scale. The
// levels' offsets (Q4_1's and the K-quants' minimums) fold into the activations' sums. Weights are read once
// per 64 activation rows; each weight row's super-blocks are expanded once per 4 rows, in L1.
//
// Types: Q4_0/Q4_1 and Q8_0 in the (levels, dm) layout of q4_decode.DecodeWeight; Q4_K, Q5_K, Q6_K and
// IQ4_XS as the file's super-blocks (KQuantWeight).
#include <ATen/ATen.h>
#include <immintrin.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace mooncake_avx2 {

constexpr int64_t kGroup = 32;
constexpr int64_t kRowBlock = 64;  // activation rows per pass over the weights

inline float half_at(const uint8_t* p) {
  uint16_t bits;
  __builtin_memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

// Per row, per 32 values: the levels (int8, or 14-bit ones as 128 * high + low, both int8 with low 0..127),
// the scale, and scale * sum(levels) for the weights' offsets.
struct Activations {
  int64_t rows, k, groups;
  bool wide;
  std::vector<int8_t> q, low;
  std::vector<float> d, dsum;

  Activations(const float* x, int64_t rows_, int64_t k_, bool wide_)
      : rows(rows_), k(k_), groups(k_ / kGroup), wide(wide_), q(rows_ * k_), low(wide_ ? rows_ * k_ : 0),
        d(rows_ * groups), dsum(rows_ * groups) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const float top = wide ? 8191.0f : 127.0f;
#pragma omp parallel for schedule(static) if (rows * k >= 65536)
    for (int64_t g = 0; g < rows * groups; ++g) {
      const float* v = x + g * kGroup;  // rows are contiguous, so group g of the whole input is row-major
      __m256 in[4], amax = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        in[i] = _mm256_loadu_ps(v + 8 * i);
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, in[i]));
      }
      const float m = hmax(amax);
      const float scale = m / top;
      const __m256 inverse = _mm256_set1_ps(scale != 0.0f ? top / m : 0.0f);
      __m256i ints[4];
      for (int i = 0; i < 4; ++i) ints[i] = _mm256_cvtps_epi32(_mm256_mul_ps(in[i], inverse));
      const __m256i sum32 = _mm256_add_epi32(_mm256_add_epi32(ints[0], ints[1]), _mm256_add_epi32(ints[2], ints[3]));
      d[g] = scale;
      dsum[g] = scale * hsum(_mm256_cvtepi32_ps(sum32));
      if (wide) {  // high = floor(v / 128) in -64..63, low = v - 128 * high in 0..127
        __m256i high[4], rest[4];
        for (int i = 0; i < 4; ++i) {
          high[i] = _mm256_srai_epi32(ints[i], 7);
          rest[i] = _mm256_sub_epi32(ints[i], _mm256_slli_epi32(high[i], 7));
        }
        store_bytes(low.data() + g * kGroup, rest);
        store_bytes(q.data() + g * kGroup, high);
      } else {
        store_bytes(q.data() + g * kGroup, ints);
      }
    }
  }

  // Packs 32 int32 (each within int8) to bytes in order: packs interleave 128-bit lanes, the permute puts
  // them back.
  static void store_bytes(int8_t* dst, const __m256i* ints) {
    const __m256i words = _mm256_packs_epi32(ints[0], ints[1]), words2 = _mm256_packs_epi32(ints[2], ints[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words, words2),
                                                      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), bytes);
  }

  float value(int64_t i) const {
    const int level = wide ? 128 * q[i] + low[i] : q[i];
    return static_cast<float>(level) * d[i / kGroup];
  }
};

// Sum of products of 32 unsigned levels with 32 signed activations, as 8 int32 lanes.
inline __m256i dot_unsigned(__m256i levels, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(levels, x), _mm256_set1_epi16(1));
}

inline __m256i dot_signed(__m256i levels, __m256i x) {
  return dot_unsigned(_mm256_sign_epi8(levels, levels), _mm256_sign_epi8(x, levels));
}

inline __m256i nibbles(const uint8_t* p) {  // 16 bytes: low nibbles are values 0-15, high ones 16-31
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), low4), _mm_and_si128(b, low4));
}

// Each format expands one stored block of kValues weights: per 32, the int32 lanes of its dot with the
// activations, the factor that scales them (times the activations' scale), and the offset per unit of
// scale * sum(activations).
struct Q4Format {  // Q4_0/Q4_1: W = d * q + m per 32, q 0..15
  static constexpr int64_t kValues = 32;
  const uint8_t* levels;
  const uint16_t* dm;
  float scale[1], offset[1];
  __m256i w[1];
  void load(int64_t b) {
    scale[0] = _cvtsh_ss(dm[2 * b]);
    offset[0] = _cvtsh_ss(dm[2 * b + 1]);
    w[0] = nibbles(levels + 16 * b);
  }
  __m256i dot(int j, __m256i x) const { return dot_unsigned(w[j], x); }
};

struct Q8Format {  // Q8_0: W = d * q, q int8
  static constexpr int64_t kValues = 32;
  const uint8_t* levels;
  const uint16_t* dm;
  float scale[1], offset[1] = {0.0f};
  __m256i w[1];
  void load(int64_t b) {
    scale[0] = _cvtsh_ss(dm[2 * b]);
    w[0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(levels + 32 * b));
  }
  __m256i dot(int j, __m256i x) const { return dot_signed(w[j], x); }
};

// Q4_K/Q5_K's 6-bit (scale, minimum) of sub-block j: ggml's get_scale_min_k4.
inline void scale_min_k4(const uint8_t* s, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = s[j] & 63;
    *m = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

template <bool kFifthBit>
struct K4Format {  // Q4_K {d, dmin, scales[12], qs[128]}; Q5_K adds qh[32] before qs. W = d*sc*q - dmin*m
  static constexpr int64_t kValues = 256;
  static constexpr int64_t kBytes = kFifthBit ? 176 : 144;
  const uint8_t* row;
  float scale[8], offset[8];
  __m256i w[8];
  void load(int64_t b) {
    const uint8_t* block = row + b * kBytes;
    const float d = half_at(block), dmin = half_at(block + 2);
    const uint8_t* qs = block + (kFifthBit ? 48 : 16);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i high = kFifthBit ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 16))
                                   : _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      scale_min_k4(block + 4, j, &sc, &m);
      scale[j] = d * static_cast<float>(sc);
      offset[j] = -dmin * static_cast<float>(m);
      const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + (j / 2) * 32));
      __m256i q = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(bytes, 4) : bytes, low4);
      if (kFifthBit) {  // bit j of qh[l] is 16 for value l of sub-block j
        const __m256i bit = _mm256_and_si256(_mm256_srli_epi16(high, j), _mm256_set1_epi8(1));
        q = _mm256_or_si256(q, _mm256_slli_epi16(bit, 4));
      }
      w[j] = q;
    }
  }
  __m256i dot(int j, __m256i x) const { return dot_unsigned(w[j], x); }
};

struct Q6KFormat {  // {ql[128], qh[64], scales[16] int8, d}: W = d * sc16 * (q - 32), q 0..63
  static constexpr int64_t kValues = 256;
  static constexpr int64_t kBytes = 210;
  const uint8_t* row;
  float scale[8], offset[8] = {};
  __m256i w[8], sc16[8];  // levels minus 32; each 16 values' scale as int16 lanes
  void load(int64_t b) {
    const uint8_t* block = row + b * kBytes;
    const float d = half_at(block + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(block + 192);
    for (int j = 0; j < 8; ++j) {
      const int n = j / 4, s = j % 4;
      const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 64 * n + 32 * (s & 1)));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 128 + 32 * n));
      const __m256i low = _mm256_and_si256(s >> 1 ? _mm256_srli_epi16(ql, 4) : ql, _mm256_set1_epi8(0x0F));
      const __m256i top = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * s), _mm256_set1_epi8(3));
      w[j] = _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(top, 4)), _mm256_set1_epi8(32));
      sc16[j] = _mm256_set_m128i(_mm_set1_epi16(sc[8 * n + 2 * s + 1]), _mm_set1_epi16(sc[8 * n + 2 * s]));
      scale[j] = d;
    }
  }
  __m256i dot(int j, __m256i x) const {
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w[j], w[j]), _mm256_sign_epi8(x, w[j]));
    return _mm256_madd_epi16(pairs, sc16[j]);
  }
};

struct IQ4XSFormat {  // {d, scales_h, scales_l[4], qs[128]}: W = d * (ls - 32) * kvalues[q]
  static constexpr int64_t kValues = 256;
  static constexpr int64_t kBytes = 136;
  const uint8_t* row;
  float scale[8], offset[8] = {};
  __m256i w[8];
  void load(int64_t b) {
    const uint8_t* block = row + b * kBytes;
    const float d = half_at(block);
    uint16_t scales_h;
    __builtin_memcpy(&scales_h, block + 2, 2);
    const __m128i table = _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    for (int j = 0; j < 8; ++j) {
      const int ls = ((block[4 + j / 2] >> (4 * (j % 2))) & 0x0F) | (((scales_h >> (2 * j)) & 3) << 4);
      scale[j] = d * static_cast<float>(ls - 32);
      w[j] = _mm256_shuffle_epi8(_mm256_set_m128i(table, table), nibbles(block + 8 + 16 * j));
    }
  }
  __m256i dot(int j, __m256i x) const { return dot_signed(w[j], x); }
};

// One weight row against kRows activation rows starting at r0: out[r] for each.
template <class F, int kRows>
inline void row_against(F& format, int64_t blocks, const Activations& a, int64_t r0, float* out) {
  constexpr int kSub = static_cast<int>(F::kValues / kGroup);
  __m256 acc[kRows];
  float offsets[kRows];
  for (int r = 0; r < kRows; ++r) {
    acc[r] = _mm256_setzero_ps();
    offsets[r] = 0.0f;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    format.load(b);
    for (int j = 0; j < kSub; ++j) {
      const int64_t g = b * kSub + j;
      for (int r = 0; r < kRows; ++r) {
        const int64_t at = (r0 + r) * a.groups + g;
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q.data() + at * kGroup));
        __m256i dot = format.dot(j, x);
        if (a.wide) {  // every format's dot is linear in x and stays within int16 pairs for 7-bit parts
          const __m256i x_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.low.data() + at * kGroup));
          dot = _mm256_add_epi32(_mm256_slli_epi32(dot, 7), format.dot(j, x_low));
        }
        const __m256 sums = _mm256_cvtepi32_ps(dot);
        acc[r] = _mm256_fmadd_ps(sums, _mm256_set1_ps(format.scale[j] * a.d[at]), acc[r]);
        offsets[r] += format.offset[j] * a.dsum[at];
      }
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = hsum(acc[r]) + offsets[r];
}

template <class F, class Make>
void multiply(const Activations& a, int64_t out_features, Make make, float* y) {
  const int64_t blocks = a.k / F::kValues;
  for (int64_t first = 0; first < a.rows; first += kRowBlock) {
    const int64_t last = std::min(first + kRowBlock, a.rows);
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < out_features; ++o) {
      F format = make(o);
      float out[4];
      for (int64_t r0 = first; r0 < last; r0 += 4) {
        const int64_t n = std::min<int64_t>(4, last - r0);
        switch (n) {
          case 4: row_against<F, 4>(format, blocks, a, r0, out); break;
          case 3: row_against<F, 3>(format, blocks, a, r0, out); break;
          case 2: row_against<F, 2>(format, blocks, a, r0, out); break;
          default: row_against<F, 1>(format, blocks, a, r0, out); break;
        }
        for (int64_t r = 0; r < n; ++r) y[(r0 + r) * out_features + o] = out[r];
      }
    }
  }
}

at::Tensor finish(at::Tensor y, const c10::optional<at::Tensor>& bias, at::ScalarType dtype) {
  if (bias.has_value() && bias->defined()) y.add_(bias->to(at::kFloat));
  return y.to(dtype);
}

at::Tensor flat_input(const at::Tensor& x) {
  TORCH_CHECK(x.dim() == 2 && x.size(1) % kGroup == 0, "x must be [rows, in] with in a multiple of 32");
  return x.to(at::kFloat).contiguous();
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
  const Activations a(xf.data_ptr<float>(), xf.size(0), k, wide);
  at::Tensor y = at::empty({xf.size(0), out_features}, xf.options());
  const auto* base = static_cast<const uint8_t*>(levels.data_ptr());
  const auto* pairs = reinterpret_cast<const uint16_t*>(dm.data_ptr<at::Half>());
  const int64_t row_bytes = levels.size(1), row_pairs = dm.size(1);
  if (q8) {
    multiply<Q8Format>(a, out_features, [&](int64_t o) { return Q8Format{base + o * row_bytes, pairs + o * row_pairs}; },
                       y.data_ptr<float>());
  } else {
    multiply<Q4Format>(a, out_features, [&](int64_t o) { return Q4Format{base + o * row_bytes, pairs + o * row_pairs}; },
                       y.data_ptr<float>());
  }
  return finish(y, bias, x.scalar_type());
}

template <class F>
void kquant_rows(const Activations& a, const at::Tensor& raw, float* y) {
  const auto* base = raw.data_ptr<uint8_t>();
  const int64_t row_bytes = raw.size(1);
  multiply<F>(a, raw.size(0), [&](int64_t o) { return F{base + o * row_bytes}; }, y);
}

// K-quant super-blocks as the file stores them: raw [out, in / 256 * bytes], kind ggml's type id.
at::Tensor kquant_linear(const at::Tensor& x, const at::Tensor& raw, int64_t kind,
                         const c10::optional<at::Tensor>& bias, bool wide) {
  const at::Tensor xf = flat_input(x);
  const int64_t k = xf.size(1);
  TORCH_CHECK(raw.is_contiguous() && raw.scalar_type() == at::kByte && k % 256 == 0, "bad super-block layout");
  const int64_t bytes = kind == 12 ? 144 : kind == 13 ? 176 : kind == 14 ? 210 : kind == 23 ? 136 : 0;
  TORCH_CHECK(bytes != 0, "unsupported K-quant type ", kind);
  TORCH_CHECK(raw.size(1) == k / 256 * bytes, "super-blocks do not match x");
  const Activations a(xf.data_ptr<float>(), xf.size(0), k, wide);
  at::Tensor y = at::empty({xf.size(0), raw.size(0)}, xf.options());
  switch (kind) {
    case 12: kquant_rows<K4Format<false>>(a, raw, y.data_ptr<float>()); break;
    case 13: kquant_rows<K4Format<true>>(a, raw, y.data_ptr<float>()); break;
    case 14: kquant_rows<Q6KFormat>(a, raw, y.data_ptr<float>()); break;
    default: kquant_rows<IQ4XSFormat>(a, raw, y.data_ptr<float>()); break;
  }
  return finish(y, bias, x.scalar_type());
}

// The activations as the kernels quantize them (levels times scales), for tests and the load-time check.
at::Tensor quantized_input(const at::Tensor& x, bool wide) {
  const at::Tensor xf = flat_input(x);
  const Activations a(xf.data_ptr<float>(), xf.size(0), xf.size(1), wide);
  at::Tensor out = at::empty_like(xf);
  float* o = out.data_ptr<float>();
  for (int64_t i = 0; i < xf.numel(); ++i) o[i] = a.value(i);
  return out;
}

}  // namespace mooncake_avx2

TORCH_LIBRARY(mooncake_avx2, m) {
  m.def("block_linear(Tensor x, Tensor levels, Tensor dm, Tensor? bias, bool wide) -> Tensor");
  m.def("kquant_linear(Tensor x, Tensor raw, int kind, Tensor? bias, bool wide) -> Tensor");
  m.def("quantized_input(Tensor x, bool wide) -> Tensor");
}

TORCH_LIBRARY_IMPL(mooncake_avx2, CPU, m) {
  m.impl("block_linear", &mooncake_avx2::block_linear);
  m.impl("kquant_linear", &mooncake_avx2::kquant_linear);
  m.impl("quantized_input", &mooncake_avx2::quantized_input);
}
