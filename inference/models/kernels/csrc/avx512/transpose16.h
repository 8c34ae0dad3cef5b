// A 16 x 16 matrix of 32-bit words, one row per zmm, transposed in registers: for AMX B layouts
// (block_gemm.h, kquant_tile_activations.h) and for writing a 16 x 16 block of C tile results row by row of
// y rather than one scalar at a time (block_kernels.h, kquant_tiles.h).
#pragma once

#include <immintrin.h>

namespace mooncake_avx512 {

// r[i] <- column i of the 16 x 16 matrix of 32-bit words whose row j was r[j].
inline void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j) {
      t[8 * i + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0x88);
      t[8 * i + 4 + j] = _mm512_shuffle_i32x4(r[8 * i + j], r[8 * i + 4 + j], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0x88);
    r[8 + j] = _mm512_shuffle_i32x4(t[j], t[8 + j], 0xdd);
  }
}

}  // namespace mooncake_avx512
