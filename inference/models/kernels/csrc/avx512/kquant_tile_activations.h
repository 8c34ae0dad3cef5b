// The activations' side of the K-quant tile path (kquant_tiles.h): up to 16 quantized activation rows
// (kquant_int8.h, kquant_int16.h) laid out once per input (IntegerActivations, kquant_integer.h) as AMX B
// tiles, with the per-super-block values the tile path applies in 16 lanes, one per row.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "transpose16.h"

namespace mooncake_avx512 {

// Activation rows (at most 16, the rest zero) as B tiles and per-super-block lanes (one lane per row).
struct TileActivations {
  std::vector<uint32_t> hi, lo;  // [k / 4][16] words of 4 int8 values; lo is empty for int8 activations
  std::vector<float> dx;         // [k / 256][16]
  // For Q4_K/Q5_K's minimums, x's sums per 32 as int16 pairs (sub-blocks 2i, 2i + 1) in int32 words,
  // [k / 256][4][16], of the hi values (int8 activations: of x) and of the lo values.
  std::vector<uint32_t> sums_hi, sums_lo;
};

// Row m's 64 bytes of block b (int16 activations: hi = q >> 7 or lo = q & 127 of its 64 values).
inline __m512i block_bytes(const int16_t* q16, const int8_t* q8, int64_t m, int64_t k, int64_t b, bool low) {
  if (q16 == nullptr) return _mm512_loadu_si512(q8 + m * k + b * 64);
  const auto half = [&](int64_t at) {
    const __m512i q = _mm512_loadu_si512(q16 + m * k + b * 64 + at);
    return _mm512_cvtepi16_epi8(low ? _mm512_and_si512(q, _mm512_set1_epi16(127)) : _mm512_srai_epi16(q, 7));
  };
  return _mm512_inserti64x4(_mm512_castsi256_si512(half(0)), half(32), 1);
}

// One 64-value block of every row in B's layout (word (w, m) = row m's bytes 4w .. 4w + 3), and each row's
// sums of its two 32-value halves as an int16 pair.
inline void block_to_b(const int16_t* q16, const int8_t* q8, int64_t rows, int64_t k, int64_t b, bool low,
                       uint32_t* words_out, uint32_t* sums_out) {
  __m512i words[16];
  for (int m = 0; m < 16; ++m) words[m] = m < rows ? block_bytes(q16, q8, m, k, b, low) : _mm512_setzero_si512();
  transpose16(words);
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i first = _mm512_setzero_si512(), second = _mm512_setzero_si512();
  for (int i = 0; i < 16; ++i) {
    _mm512_storeu_si512(words_out + (b * 16 + i) * 16, words[i]);
    if (i < 8) {
      first = _mm512_dpbusd_epi32(first, ones, words[i]);
    } else {
      second = _mm512_dpbusd_epi32(second, ones, words[i]);
    }
  }
  const __m512i pairs = _mm512_or_si512(_mm512_and_si512(first, _mm512_set1_epi32(0xFFFF)),
                                        _mm512_slli_epi32(second, 16));
  _mm512_storeu_si512(sums_out + b * 16, pairs);
}

// int16 activations: a = 128 * hi + lo (hi in -64..63, lo in 0..127); int8 ones: hi = x. Laid out 64 values
// at a time, each block's bytes straight from the quantized rows. (Across the threads it was no faster: a
// 16-row, 2048-wide input takes a few microseconds.)
inline TileActivations tile_activations(const int16_t* q16, const int8_t* q8, const float* d, int64_t rows,
                                        int64_t k) {
  const bool wide = q16 != nullptr;
  const int64_t lo_words = wide ? k / 4 * 16 : 0, lo_sums = wide ? k / 64 * 16 : 0;
  TileActivations out{std::vector<uint32_t>(k / 4 * 16), std::vector<uint32_t>(lo_words),
                      std::vector<float>(k / 256 * 16, 0.0f), std::vector<uint32_t>(k / 64 * 16),
                      std::vector<uint32_t>(lo_sums)};
  for (int64_t b = 0; b < k / 64; ++b) {
    block_to_b(q16, q8, rows, k, b, false, out.hi.data(), out.sums_hi.data());
    if (wide) block_to_b(q16, q8, rows, k, b, true, out.lo.data(), out.sums_lo.data());
  }
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t sb = 0; sb < k / 256; ++sb) out.dx[sb * 16 + m] = d[m * (k / 256) + sb];
  return out;
}

}  // namespace mooncake_avx512
