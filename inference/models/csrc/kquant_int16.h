// Decoding rows against K-quant super-blocks in integers with 14-bit activations: each activation row is
// quantized per 256 values to int16 in -8191..8191 with one fp32 scale (d = amax / 8191), each weight
// level is widened to int16 and multiplied by its sub-block's integer scale (Q6_K's levels centred first),
// and vpdpwssd sums weights x activations exactly in int32 lanes, joined into one exact int64 total per
// super-block. Floating point enters once per super-block, as in kquant_int8.h (add_super_block). 8191 keeps
// every lane inside int32: |(q - 32) * sc| <= 4096 for Q6_K, 16 products a lane.
//
// Against int8 activations (kquant_int8.h, llama.cpp's numerics) each value keeps 64 times finer steps: on
// the bundled model requantized to Q4_K_M its error against the bf16 activations' product is several times
// smaller, and 6-7 of 8 greedy replies equal the bf16 reference's for 16 tokens where int8 gives 5-6 (bf16
// activations: 8). It costs more instructions per weight (bench/NOTES.md, sessions 22 and 24).
#pragma once

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "kquant_levels.h"

namespace mooncake_q4 {

constexpr float kLevels16 = 8191.0f;

struct Quantized16 {
  std::vector<int16_t> q;
  std::vector<float> d;
  std::vector<int32_t> sums;  // per 32
};

inline Quantized16 quantize_rows16(const uint16_t* x, int64_t rows, int64_t k) {
  Quantized16 out{std::vector<int16_t>(rows * k), std::vector<float>(rows * k / 256),
                      std::vector<int32_t>(rows * k / 32)};
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
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.data() + sb * 256 + i * 16), _mm512_cvtsepi32_epi16(q0));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q.data() + sb * 256 + i * 16 + 16), _mm512_cvtsepi32_epi16(q1));
      out.sums[sb * 8 + i / 2] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
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
template <class Fmt>
void int16_multiply(const uint16_t* xs, const uint8_t* raw, float* y, int64_t rows, int64_t k, int64_t n) {
  const Quantized16 xq = quantize_rows16(xs, rows, k);
  const WideIndex<Fmt> index;
  integer_groups(rows, n, [&](auto m, auto r, int64_t m0, int64_t row) {
    int16_rows<Fmt, decltype(m)::value, decltype(r)::value>(raw, xq, index, y, m0, row, k, n);
  });
}

}  // namespace mooncake_q4
