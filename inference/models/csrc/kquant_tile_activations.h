// The activations' side of the K-quant tile path (kquant_tiles.h): up to 16 quantized activation rows
// (kquant_int8.h, kquant_int16.h) laid out once per call as AMX B tiles, with the per-super-block values the
// tile path applies in 16 lanes, one per row.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "block_gemm.h"

namespace mooncake_q4 {

// Activation rows (at most 16, the rest zero) as B tiles and per-super-block lanes (one lane per row).
struct TileActivations {
  std::vector<uint32_t> hi, lo;  // [k / 4][16] words of 4 int8 values; lo is empty for int8 activations
  std::vector<float> dx;         // [k / 256][16]
  // For Q4_K/Q5_K's minimums, x's sums per 32 as int16 pairs (sub-blocks 2i, 2i + 1) in int32 words,
  // [k / 256][4][16], of the hi values (int8 activations: of x) and of the lo values.
  std::vector<uint32_t> sums_hi, sums_lo;
};

// Rows of bytes [16][k] into B's layout: word (w, m) = row m's bytes 4w .. 4w + 3.
inline void to_b_layout(const std::vector<int8_t>& bytes, int64_t k, std::vector<uint32_t>* out) {
  out->assign(k / 4 * 16, 0u);
  __m512i words[16];
  for (int64_t w = 0; w < k / 4; w += 16) {
    for (int m = 0; m < 16; ++m) words[m] = _mm512_loadu_si512(bytes.data() + m * k + w * 4);
    transpose16(words);
    for (int i = 0; i < 16; ++i) _mm512_storeu_si512(out->data() + (w + i) * 16, words[i]);
  }
}

// The sum of 32 int8 values as int16.
inline int16_t sum32(const int8_t* v) {
  const __m512i wide = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v)));
  return static_cast<int16_t>(_mm512_reduce_add_epi32(_mm512_madd_epi16(wide, _mm512_set1_epi16(1))));
}

// Sums per 32 of rows of bytes [16][k] as TileActivations' int16 pairs.
inline std::vector<uint32_t> pair_sums(const std::vector<int8_t>& bytes, int64_t rows, int64_t k) {
  std::vector<uint32_t> out(k / 256 * 4 * 16, 0u);
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t j = 0; j < k / 32; j += 2) {
      const auto a = static_cast<uint16_t>(sum32(bytes.data() + m * k + j * 32));
      const auto b = static_cast<uint16_t>(sum32(bytes.data() + m * k + j * 32 + 32));
      out[(j / 2) * 16 + m] = a | (static_cast<uint32_t>(b) << 16);
    }
  return out;
}

// int16 activations: a = 128 * hi + lo (hi in -64..63, lo in 0..127); int8 ones: hi = x.
inline TileActivations tile_activations(const int16_t* q16, const int8_t* q8, const float* d, int64_t rows,
                                        int64_t k) {
  TileActivations out{{}, {}, std::vector<float>(k / 256 * 16, 0.0f), {}, {}};
  std::vector<int8_t> hi(16 * k, 0), lo;
  if (q16 != nullptr) {
    lo.assign(16 * k, 0);
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t i = 0; i < k; i += 32) {
        const __m512i q = _mm512_loadu_si512(q16 + m * k + i);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi.data() + m * k + i),
                            _mm512_cvtepi16_epi8(_mm512_srai_epi16(q, 7)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo.data() + m * k + i),
                            _mm512_cvtepi16_epi8(_mm512_and_si512(q, _mm512_set1_epi16(127))));
      }
  } else {
    std::copy(q8, q8 + rows * k, hi.begin());
  }
  to_b_layout(hi, k, &out.hi);
  out.sums_hi = pair_sums(hi, rows, k);
  if (q16 != nullptr) {
    to_b_layout(lo, k, &out.lo);
    out.sums_lo = pair_sums(lo, rows, k);
  }
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t sb = 0; sb < k / 256; ++sb) out.dx[sb * 16 + m] = d[m * (k / 256) + sb];
  return out;
}

}  // namespace mooncake_q4
