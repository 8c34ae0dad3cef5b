// Four weight rows' per-super-block work in vector lanes, for the register kernels' most common group (one
// or two decoding rows against 4 weight rows, kquant_int16.h): the scales and fp32 factors of 4 super-blocks
// decoded together, and their exact integer totals reduced together, row r in lane r. Done row by row these
// steps took about as long as the multiply-adds on 2048-wide rows (8 super-blocks a row).
//
// Every lane computes what add_super_block (kquant_levels.h) computes for its row, in the same order, so the
// bits equal the one-row code's and the tiles'.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kquant_levels.h"

namespace mooncake_avx512 {

// Four rows' sums of 16 int32 lanes as 4 int32, row r in lane r. Exact where the sum of every row's
// |lanes| fits int32 (the caller's bound).
inline __m128i sum4_epi32(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(v0, v1), _mm512_unpackhi_epi32(v0, v1));
  const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(v2, v3), _mm512_unpackhi_epi32(v2, v3));
  const __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
  const __m256i d = _mm256_add_epi32(_mm512_castsi512_si256(c), _mm512_extracti64x4_epi64(c, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(d), _mm256_extracti128_si256(d, 1));
}

// Sixteen int32 lanes (each below 2^30 in magnitude) as 8 int64 partial sums.
inline __m512i widen_pairs(__m512i v) {
  return _mm512_cvtepi32_epi64(
      _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)));
}

// Four rows' exact sums of 16 int32 lanes (each below 2^30) as 4 int64, row r in lane r.
inline __m256i sum4_epi64(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
  const __m512i w0 = widen_pairs(v0), w1 = widen_pairs(v1), w2 = widen_pairs(v2), w3 = widen_pairs(v3);
  // Each 128-bit chunk: [row 0, row 1] (a) and [row 2, row 3] (b) partial sums.
  const __m512i a = _mm512_add_epi64(_mm512_unpacklo_epi64(w0, w1), _mm512_unpackhi_epi64(w0, w1));
  const __m512i b = _mm512_add_epi64(_mm512_unpacklo_epi64(w2, w3), _mm512_unpackhi_epi64(w2, w3));
  // Chunks [a0 + a1, a2 + a3, b0 + b1, b2 + b3], then the pairs of chunks added.
  const __m512i c = _mm512_add_epi64(_mm512_shuffle_i64x2(a, b, 0x88), _mm512_shuffle_i64x2(a, b, 0xDD));
  const __m512i d = _mm512_add_epi64(c, _mm512_shuffle_i64x2(c, c, 0xB1));
  return _mm512_castsi512_si256(_mm512_shuffle_i64x2(d, d, 0x08));
}

// The fp32 factors of four super-blocks: d (and dmin) of row r in lane r.
struct FourFactors {
  __m128 d, dmin;
};

// Q4_K/Q5_K: 4 rows' (sc, m) bytes decoded as k4_scale_bytes decodes one (every step stays inside its
// 128-bit lane), widened to int16 lanes as Q4KLevels::decode gives them; d and dmin from the halves.
inline FourFactors decode4_k4(const uint8_t* const blocks[4], __m512i scales[4]) {
  __m512i w0 = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[0] + 4)));
  w0 = _mm512_inserti32x4(w0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[1] + 4)), 1);
  w0 = _mm512_inserti32x4(w0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[2] + 4)), 2);
  w0 = _mm512_inserti32x4(w0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[3] + 4)), 3);
  const __m512i six = _mm512_set1_epi8(0x3F), low4 = _mm512_set1_epi8(0x0F), top2 = _mm512_set1_epi8(0x30);
  const __m512i w1 = _mm512_bsrli_epi128(w0, 4), w2 = _mm512_bsrli_epi128(w0, 8);
  const __m512i sc_lo = _mm512_and_si512(w0, six), m_lo = _mm512_and_si512(w1, six);
  const __m512i sc_hi =
      _mm512_or_si512(_mm512_and_si512(w2, low4), _mm512_and_si512(_mm512_srli_epi32(w0, 2), top2));
  const __m512i m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), low4),
                                       _mm512_and_si512(_mm512_srli_epi32(w1, 2), top2));
  const __m512i bytes =
      _mm512_unpacklo_epi64(_mm512_unpacklo_epi32(sc_lo, sc_hi), _mm512_unpacklo_epi32(m_lo, m_hi));
  scales[0] = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm512_castsi512_si128(bytes)));
  scales[1] = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm512_extracti32x4_epi32(bytes, 1)));
  scales[2] = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm512_extracti32x4_epi32(bytes, 2)));
  scales[3] = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm512_extracti32x4_epi32(bytes, 3)));
  int32_t halves[4];  // d and dmin of each block, as stored
  for (int r = 0; r < 4; ++r) __builtin_memcpy(&halves[r], blocks[r], 4);
  const __m256 both = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(halves)));
  const __m256 split = _mm256_permutevar8x32_ps(both, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
  return {_mm256_castps256_ps128(split), _mm256_extractf128_ps(split, 1)};
}

// Q6_K: 4 rows' int8 scales as int16 lanes and d (dmin unused).
inline FourFactors decode4_q6k(const uint8_t* const blocks[4], __m512i scales[4]) {
  alignas(16) uint16_t halves[8] = {};
  for (int r = 0; r < 4; ++r) {
    scales[r] = _mm512_castsi256_si512(
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[r] + 192))));
    __builtin_memcpy(&halves[r], blocks[r] + 208, 2);
  }
  return {_mm256_castps256_ps128(_mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(halves)))),
          _mm_setzero_ps()};
}

// What add_super_block does for one row, for 4 rows: y += float(total) * (dx * d), then for Q4_K/Q5_K
// y -= float(mins) * (dx * dmin), both as single FMAs.
template <class Fmt>
inline __m128 add_super_blocks4(__m128 y, __m128 total, __m128i mins, float dx, const FourFactors& f) {
  const __m128 scale = _mm_set1_ps(dx);
  y = _mm_fmadd_ps(total, _mm_mul_ps(scale, f.d), y);
  if constexpr (Fmt::kMins) {
    const __m128 negated = _mm_xor_ps(_mm_cvtepi32_ps(mins), _mm_set1_ps(-0.0f));
    y = _mm_fmadd_ps(negated, _mm_mul_ps(scale, f.dmin), y);
  }
  return y;
}

template <class Fmt>
inline FourFactors decode4(const uint8_t* const blocks[4], __m512i scales[4]) {
  if constexpr (std::is_same_v<Fmt, Q6KLevels>) {
    return decode4_q6k(blocks, scales);
  } else {
    static_assert(std::is_same_v<Fmt, Q4KLevels> || std::is_same_v<Fmt, Q5KLevels>);
    return decode4_k4(blocks, scales);
  }
}

// Sums of 8 int32 lanes for 4 rows, rows 0 and 1 in the halves of p01, rows 2 and 3 in p23's: row r in
// lane r. Exact where each row's sum of |lanes| fits int32.
inline __m128i sum4_halves(__m512i p01, __m512i p23) {
  const __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi32(p01, p23), _mm512_unpackhi_epi32(p01, p23));
  const __m512i u = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_BADC));
  const __m512i v = _mm512_add_epi32(u, _mm512_shuffle_i32x4(u, u, 0xB1));
  // Chunk 0 holds [row 0, row 2, ...], chunk 2 [row 1, row 3, ...].
  const __m512i order = _mm512_setr_epi32(0, 8, 1, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_castsi512_si128(_mm512_permutexvar_epi32(order, v));
}

// Q4_K/Q5_K's minimums for 4 rows: sum over j of m_j * (x's sum over sub-block j), each below 2^27.
inline __m128i mins4(const __m512i scales[4], const int32_t* x32) {
  const __m512i x = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x32)));
  const auto m = [&](int r) { return _mm512_extracti32x4_epi32(scales[r], 1); };  // int16 lanes 8..15
  const __m512i m01 = _mm512_cvtepu16_epi32(_mm256_set_m128i(m(1), m(0)));
  const __m512i m23 = _mm512_cvtepu16_epi32(_mm256_set_m128i(m(3), m(2)));
  return sum4_halves(_mm512_mullo_epi32(m01, x), _mm512_mullo_epi32(m23, x));
}

// Q6_K's centre for 4 rows: sum over j of sc_j * (x's sum over sub-block j of 16), each below 2^29.
inline __m128i centre4(const __m512i scales[4], const int32_t* x16) {
  const __m512i x = _mm512_loadu_si512(x16);
  const auto product = [&](int r) {
    return _mm512_mullo_epi32(_mm512_cvtepi16_epi32(_mm512_castsi512_si256(scales[r])), x);
  };
  return sum4_epi32(product(0), product(1), product(2), product(3));
}

}  // namespace mooncake_avx512
