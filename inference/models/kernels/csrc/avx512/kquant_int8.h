// Decoding rows against K-quant super-blocks in integers, the way llama.cpp's vec-dot kernels read them:
// each activation row is quantized per 256 values to int8 with one fp32 scale (d = amax / 127, as Q8_K),
// the weights' levels stay unsigned bytes, and AVX512-BW/VNNI multiply-adds (vpmaddubsw, then vpdpwssd with
// the sub-block's integer scale) sum levels x activations exactly in int32 lanes, joined into one exact
// total per super-block. Floating point enters once per super-block (add_super_block, kquant_levels.h):
// y += (dx * d) * total, and for Q4_K/Q5_K y -= (dx * dmin) * sum(m * sum of x's sub-block).
// A pair of 32-weight blocks then costs a load, two masks and a shuffle on the weight side and two
// multiply-adds per activation row, against the bf16 path's table build and two permutes (kquant_formats.h):
// one stream's decode goes from compute-bound to nearly memory-bound.
//
// The result is the product of the dequantized weights with the quantized activations (exact integer sums,
// fp32 per super-block, one bf16 rounding), not the bf16 activations' product: the activations lose up to
// half a step of amax / 127 each, as in llama.cpp. The totals are exact integers and the fp32 steps after
// them are fixed, so a row's bits never depend on its batch, nor on whether the tiles (kquant_tiles.h) or
// these registers computed it.
// AVX512-VNNI comes with every CPU that has AVX512-BF16 (Cooper Lake, Sapphire Rapids, Zen 4 on).
#pragma once

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "kquant_levels.h"

namespace mooncake_avx512 {

// Activation rows as int8 per 256 values: q [rows, k], d [rows, k / 256], sums of q per 16 [rows, k / 16].
struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> sums;
};

// q = round-to-nearest-even(x * (127 / amax)), d = amax / 127 (0 and 0 for an all-zero super-block).
inline QuantizedRows quantize_rows(const uint16_t* x, int64_t rows, int64_t k) {
  QuantizedRows out{std::vector<int8_t>(rows * k), std::vector<float>(rows * k / 256),
                    std::vector<int16_t>(rows * k / 16)};
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
    const float iscale = max > 0.0f ? 127.0f / max : 0.0f;
    out.d[sb] = max / 127.0f;
    for (int i = 0; i < 16; ++i) {
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(v[i], _mm512_set1_ps(iscale)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out.q.data() + sb * 256 + i * 16), _mm512_cvtsepi32_epi8(q));
      out.sums[sb * 16 + i] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
  }
  return out;
}

// Weight rows [n, n + R) x activation rows [m0, m0 + M) into y [rows, n_total] (fp32).
template <class Fmt, int M, int R>
inline void int8_rows(const uint8_t* raw, const QuantizedRows& xq, const PairIndex<Fmt>& index, float* y,
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
        __m512i w = Fmt::levels(rows[r] + sb * Fmt::kBytes, p);
        __mmask64 negative = 0;
        if constexpr (Fmt::kSigned) {  // |w| x (x with w's sign): vpmaddubsw takes unsigned weights
          negative = _mm512_movepi8_mask(w);
          w = _mm512_abs_epi8(w);
        }
        const __m512i scale = _mm512_permutexvar_epi16(index.p[p], blocks[r].scales);
        for (int m = 0; m < M; ++m) {
          __m512i x = _mm512_loadu_si512(xq.q.data() + (m0 + m) * k + sb * 256 + p * 64);
          if constexpr (Fmt::kSigned) x = _mm512_mask_sub_epi8(x, negative, _mm512_setzero_si512(), x);
          sums[r][m] = _mm512_dpwssd_epi32(sums[r][m], _mm512_maddubs_epi16(w, x), scale);
        }
      }
    }
    for (int m = 0; m < M; ++m) {
      const int64_t at = (m0 + m) * sbs + sb;
      const __m256i x16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq.sums.data() + at * 16));
      alignas(32) int32_t x32[8] = {};  // x's sums per 32, for the minimums
      if constexpr (Fmt::kMins) _mm256_store_si256(reinterpret_cast<__m256i*>(x32), _mm256_madd_epi16(x16, _mm256_set1_epi16(1)));
      for (int r = 0; r < R; ++r) {
        int64_t total = exact_sum(sums[r][m]);
        if constexpr (Fmt::kCentre != 0) {  // Q6_K: minus 32 * sum(sc_j * sum of x over j's 16 values), exactly
          const __m256i corr = _mm256_madd_epi16(_mm512_castsi512_si256(blocks[r].scales), x16);
          total -= int64_t{Fmt::kCentre} * _mm512_reduce_add_epi32(_mm512_zextsi256_si512(corr));
        }
        const int32_t mins = Fmt::kMins ? mins_sum(blocks[r], x32) : 0;
        acc[r][m] = add_super_block<Fmt>(acc[r][m], total, mins, xq.d[at], blocks[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) y[(m0 + m) * n_total + n + r] = acc[r][m];
}

// y [rows, n] fp32 = quantized x @ W^T (integer_groups' grouping).
template <class Fmt>
void int8_multiply(const QuantizedRows& xq, const uint8_t* raw, float* y, int64_t rows, int64_t k, int64_t n) {
  const PairIndex<Fmt> index;
  integer_groups(rows, n, [&](auto m, auto r, int64_t m0, int64_t row) {
    int8_rows<Fmt, decltype(m)::value, decltype(r)::value>(raw, xq, index, y, m0, row, k, n);
  });
}

}  // namespace mooncake_avx512
