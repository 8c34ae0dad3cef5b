// Decoding rows against K-quant super-blocks in integers with 14-bit activations: each activation row is
// quantized per 256 values to int16 in -8191..8191 with one fp32 scale (d = amax / 8191) and kept as two
// bytes, q = 128 * hi + lo. Unsigned levels (Q4_K, Q5_K, Q6_K) meet each byte in vpmaddubsw and the pair sums
// meet the sub-block's integer scale (times 128 for hi) in vpdpwssd (split_rows); IQ4_XS's signed levels are
// widened to int16 and multiplied by their scale (int16_rows). Either way the lanes hold exact integers,
// joined into one exact total per super-block: sum sc * (level - centre) * q. Floating point enters once per
// super-block, as in kquant_int8.h (add_super_block).
//
// Against int8 activations (kquant_int8.h, llama.cpp's numerics) each value keeps 64 times finer steps: on
// the bundled model requantized to Q4_K_M its error against the bf16 activations' product is several times
// smaller, and 6-7 of 8 greedy replies equal the bf16 reference's for 16 tokens where int8 gives 5-6 (bf16
// activations: 8). It costs two multiply-adds per 64 weights and activation row where int8 takes one
// (docs/design/gguf-blocks.md).
#pragma once

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "kquant_four_rows.h"
#include "kquant_levels.h"

namespace mooncake_avx512 {

constexpr float kLevels16 = 8191.0f;

struct Quantized16 {
  std::vector<int16_t> q;
  std::vector<float> d;
  std::vector<int32_t> sums;    // per 32
  std::vector<int32_t> sums16;  // per 16, for Q6_K's centre
  // q = 128 * hi + lo, hi in -64..63 and lo in 0..127: two int8 operands for vpmaddubsw.
  std::vector<int8_t> hi, lo;
};

// With `bytes`, also hi, lo and sums16, which only the register kernels read.
inline Quantized16 quantize_rows16(const uint16_t* x, int64_t rows, int64_t k, bool bytes) {
  Quantized16 out{std::vector<int16_t>(rows * k), std::vector<float>(rows * k / 256),
                  std::vector<int32_t>(rows * k / 32), {}, {}, {}};
  if (bytes) {
    out.sums16.resize(rows * k / 16);
    out.hi.resize(rows * k);
    out.lo.resize(rows * k);
  }
  for (int64_t sb = 0; sb < rows * k / 256; ++sb) {
    const uint16_t* src = x + sb * 256;
    __m512 v[16];
    __m512 amax = _mm512_setzero_ps();
    for (int i = 0; i < 16; ++i) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i * 16));
      v[i] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
      amax = _mm512_max_ps(amax, _mm512_abs_ps(v[i]));
    }
    const float max = _mm512_reduce_max_ps(amax);
    const float iscale = max > 0.0f ? kLevels16 / max : 0.0f;
    out.d[sb] = max / kLevels16;
    for (int i = 0; i < 16; i += 2) {
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v[i], _mm512_set1_ps(iscale)));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v[i + 1], _mm512_set1_ps(iscale)));
      const int64_t at = sb * 256 + i * 16;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.data() + at), _mm512_cvtsepi32_epi16(q0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.data() + at + 16), _mm512_cvtsepi32_epi16(q1));
      const int32_t s0 = _mm512_reduce_add_epi32(q0), s1 = _mm512_reduce_add_epi32(q1);
      out.sums[sb * 8 + i / 2] = s0 + s1;
      if (!bytes) continue;
      out.sums16[sb * 16 + i] = s0;
      out.sums16[sb * 16 + i + 1] = s1;
      const __m512i low7 = _mm512_set1_epi32(127);
      const auto store = [](int8_t* dst, __m512i values) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm512_cvtepi32_epi8(values));
      };
      store(out.hi.data() + at, _mm512_srai_epi32(q0, 7));
      store(out.hi.data() + at + 16, _mm512_srai_epi32(q1, 7));
      store(out.lo.data() + at, _mm512_and_si512(q0, low7));
      store(out.lo.data() + at + 16, _mm512_and_si512(q1, low7));
    }
  }
  return out;
}

template <class Fmt>
struct WideIndex {
  __m512i lo[4], hi[4];
  WideIndex() {
    for (int pair = 0; pair < 4; ++pair) {
      alignas(64) int16_t a[32], b[32];
      for (int t = 0; t < 32; ++t) {
        a[t] = static_cast<int16_t>((pair * 64 + t) / Fmt::kWeightsPerScale);
        b[t] = static_cast<int16_t>((pair * 64 + 32 + t) / Fmt::kWeightsPerScale);
      }
      lo[pair] = _mm512_load_si512(a);
      hi[pair] = _mm512_load_si512(b);
    }
  }
};

// Unsigned levels (Q4_K, Q5_K, Q6_K) as vpmaddubsw's unsigned operand against the activations' two bytes,
// then vpdpwssd with the sub-block's scale (times 128 for the high byte): two multiply-adds per byte and
// activation row, no widening of the weights. Q6_K's centre is taken back per super-block from x's sums per
// 16. The integer total equals the widened kernel's (below) exactly. Each lane sums 4 pairs of at most
// 2 * 63 * 64 * 16384 + 2 * 63 * 127 * 128 (Q6_K's levels and |scale| <= 128): 1.0734e9, below 2^30.
template <class Fmt, int M, int R>
inline void split_rows(const uint8_t* raw, const Quantized16& xq, const PairIndex<Fmt>& index, float* y,
                       int64_t m0, int64_t n, int64_t k, int64_t n_total) {
  const int64_t sbs = k / 256;
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = raw + (n + r) * sbs * Fmt::kBytes;
  float acc[R][M] = {};
  for (int64_t sb = 0; sb < sbs; ++sb) {
    SuperBlock blocks[R];
    for (int r = 0; r < R; ++r) {
      prefetch_super_block<Fmt>(rows[r] + sb * Fmt::kBytes, sbs, R);
      blocks[r] = Fmt::decode(rows[r] + sb * Fmt::kBytes);
    }
    __m512i sums[R][M];
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) sums[r][m] = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      for (int r = 0; r < R; ++r) {
        const __m512i levels = Fmt::levels(rows[r] + sb * Fmt::kBytes, p);
        const __m512i scale = _mm512_permutexvar_epi16(index.p[p], blocks[r].scales);
        const __m512i scale_hi = _mm512_slli_epi16(scale, 7);
        for (int m = 0; m < M; ++m) {
          const int64_t at = (m0 + m) * k + sb * 256 + p * 64;
          const __m512i hi = _mm512_maddubs_epi16(levels, _mm512_loadu_si512(xq.hi.data() + at));
          const __m512i lo = _mm512_maddubs_epi16(levels, _mm512_loadu_si512(xq.lo.data() + at));
          sums[r][m] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sums[r][m], hi, scale_hi), lo, scale);
        }
      }
    }
    for (int m = 0; m < M; ++m) {
      const int64_t at = (m0 + m) * sbs + sb;
      for (int r = 0; r < R; ++r) {
        int64_t total = exact_sum(sums[r][m]);
        if constexpr (Fmt::kCentre != 0) {  // minus 32 * sum(sc_j * x's sum over j's 16): below 2^29
          const __m512i x16 = _mm512_loadu_si512(xq.sums16.data() + at * 16);
          const __m512i sc = _mm512_cvtepi16_epi32(_mm512_castsi512_si256(blocks[r].scales));
          total -= int64_t{Fmt::kCentre} * _mm512_reduce_add_epi32(_mm512_mullo_epi32(sc, x16));
        }
        const int32_t mins = Fmt::kMins ? mins_sum(blocks[r], xq.sums.data() + at * 8) : 0;
        acc[r][m] = add_super_block<Fmt>(acc[r][m], total, mins, xq.d[at], blocks[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) y[(m0 + m) * n_total + n + r] = acc[r][m];
}

// split_rows for a group of 4 weight rows, their per-super-block steps in vector lanes (kquant_four_rows.h).
// Q4_K's 16 lanes sum to at most 16 * 4 * (2 * 15 * 64 * 8064 + 2 * 15 * 127 * 63) = 2.0125e9 in magnitude,
// so its totals are reduced in int32; Q5_K's and Q6_K's in int64.
template <class Fmt, int M>
inline void split_rows4(const uint8_t* raw, const Quantized16& xq, const PairIndex<Fmt>& index, float* y,
                        int64_t m0, int64_t n, int64_t k, int64_t n_total) {
  const int64_t sbs = k / 256;
  const uint8_t* rows[4];
  for (int r = 0; r < 4; ++r) rows[r] = raw + (n + r) * sbs * Fmt::kBytes;
  __m128 acc[M];
  for (int m = 0; m < M; ++m) acc[m] = _mm_setzero_ps();
  for (int64_t sb = 0; sb < sbs; ++sb) {
    const uint8_t* blocks[4];
    for (int r = 0; r < 4; ++r) {
      blocks[r] = rows[r] + sb * Fmt::kBytes;
      prefetch_super_block<Fmt>(blocks[r], sbs, 4);
    }
    __m512i scales[4];
    const FourFactors factors = decode4<Fmt>(blocks, scales);
    __m512i sums[4][M];
    for (int r = 0; r < 4; ++r)
      for (int m = 0; m < M; ++m) sums[r][m] = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      for (int r = 0; r < 4; ++r) {
        const __m512i levels = Fmt::levels(blocks[r], p);
        const __m512i scale = _mm512_permutexvar_epi16(index.p[p], scales[r]);
        const __m512i scale_hi = _mm512_slli_epi16(scale, 7);
        for (int m = 0; m < M; ++m) {
          const int64_t at = (m0 + m) * k + sb * 256 + p * 64;
          const __m512i hi = _mm512_maddubs_epi16(levels, _mm512_loadu_si512(xq.hi.data() + at));
          const __m512i lo = _mm512_maddubs_epi16(levels, _mm512_loadu_si512(xq.lo.data() + at));
          sums[r][m] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(sums[r][m], hi, scale_hi), lo, scale);
        }
      }
    }
    for (int m = 0; m < M; ++m) {
      const int64_t at = (m0 + m) * sbs + sb;
      __m128 totals;
      if constexpr (std::is_same_v<Fmt, Q4KLevels>) {
        totals = _mm_cvtepi32_ps(sum4_epi32(sums[0][m], sums[1][m], sums[2][m], sums[3][m]));
      } else {
        __m256i exact = sum4_epi64(sums[0][m], sums[1][m], sums[2][m], sums[3][m]);
        if constexpr (Fmt::kCentre != 0) {
          const __m256i centre = _mm256_cvtepi32_epi64(centre4(scales, xq.sums16.data() + at * 16));
          exact = _mm256_sub_epi64(exact, _mm256_mullo_epi64(centre, _mm256_set1_epi64x(Fmt::kCentre)));
        }
        totals = _mm256_cvtepi64_ps(exact);
      }
      const __m128i mins = Fmt::kMins ? mins4(scales, xq.sums.data() + at * 8) : _mm_setzero_si128();
      acc[m] = add_super_blocks4<Fmt>(acc[m], totals, mins, xq.d[at], factors);
    }
  }
  for (int m = 0; m < M; ++m) {
    alignas(16) float lanes[4];
    _mm_store_ps(lanes, acc[m]);
    for (int r = 0; r < 4; ++r) y[(m0 + m) * n_total + n + r] = lanes[r];
  }
}

template <class Fmt, int M, int R>
inline void int16_rows(const uint8_t* raw, const Quantized16& xq, const WideIndex<Fmt>& index, float* y,
                     int64_t m0, int64_t n, int64_t k, int64_t n_total) {
  const int64_t sbs = k / 256;
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = raw + (n + r) * sbs * Fmt::kBytes;
  float acc[R][M] = {};
  for (int64_t sb = 0; sb < sbs; ++sb) {
    SuperBlock blocks[R];
    for (int r = 0; r < R; ++r) {
      prefetch_super_block<Fmt>(rows[r] + sb * Fmt::kBytes, sbs, R);
      blocks[r] = Fmt::decode(rows[r] + sb * Fmt::kBytes);
    }
    __m512i sums[R][M];
    for (int r = 0; r < R; ++r)
      for (int m = 0; m < M; ++m) sums[r][m] = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {
      for (int r = 0; r < R; ++r) {
        const __m512i levels = Fmt::levels(rows[r] + sb * Fmt::kBytes, p);
        __m512i lo, hi;
        if constexpr (Fmt::kSigned) {
          lo = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(levels));
          hi = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(levels, 1));
        } else {
          lo = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(levels));
          hi = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(levels, 1));
        }
        if constexpr (Fmt::kCentre != 0) {
          lo = _mm512_sub_epi16(lo, _mm512_set1_epi16(Fmt::kCentre));
          hi = _mm512_sub_epi16(hi, _mm512_set1_epi16(Fmt::kCentre));
        }
        const __m512i w0 = _mm512_mullo_epi16(lo, _mm512_permutexvar_epi16(index.lo[p], blocks[r].scales));
        const __m512i w1 = _mm512_mullo_epi16(hi, _mm512_permutexvar_epi16(index.hi[p], blocks[r].scales));
        for (int m = 0; m < M; ++m) {
          const int16_t* x = xq.q.data() + (m0 + m) * k + sb * 256 + p * 64;
          sums[r][m] = _mm512_dpwssd_epi32(sums[r][m], w0, _mm512_loadu_si512(x));
          sums[r][m] = _mm512_dpwssd_epi32(sums[r][m], w1, _mm512_loadu_si512(x + 32));
        }
      }
    }
    for (int m = 0; m < M; ++m) {
      const int64_t at = (m0 + m) * sbs + sb;
      for (int r = 0; r < R; ++r) {
        // Each lane holds 16 products of at most 4096 * 8191: below 2^30, as exact_sum needs.
        const int32_t mins = Fmt::kMins ? mins_sum(blocks[r], xq.sums.data() + at * 8) : 0;
        acc[r][m] = add_super_block<Fmt>(acc[r][m], exact_sum(sums[r][m]), mins, xq.d[at], blocks[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) y[(m0 + m) * n_total + n + r] = acc[r][m];
}

// y [rows, n] fp32 = quantized x @ W^T (integer_groups' grouping).
// xq from quantize_rows16 with its bytes.
template <class Fmt>
void int16_multiply(const Quantized16& xq, const uint8_t* raw, float* y, int64_t rows, int64_t k, int64_t n) {
  if constexpr (Fmt::kSigned) {
    const WideIndex<Fmt> index;
    integer_groups(rows, n, [&](auto m, auto r, int64_t m0, int64_t row) {
      int16_rows<Fmt, decltype(m)::value, decltype(r)::value>(raw, xq, index, y, m0, row, k, n);
    });
  } else {
    const PairIndex<Fmt> index;
    integer_groups(rows, n, [&](auto m, auto r, int64_t m0, int64_t row) {
      if constexpr (decltype(r)::value == 4) {
        split_rows4<Fmt, decltype(m)::value>(raw, xq, index, y, m0, row, k, n);
      } else {
        split_rows<Fmt, decltype(m)::value, decltype(r)::value>(raw, xq, index, y, m0, row, k, n);
      }
    });
  }
}

}  // namespace mooncake_avx512
