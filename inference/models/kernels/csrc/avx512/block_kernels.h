// The kernels behind y = x @ W^T for 1-16 rows of bf16 activations, W held as a GGUF's blocks: Q4_0/Q4_1 (or
// Q8_0) here, the K-quants in kquant_formats.h (see quantization/gguf/avx512.py; built by kernels/build.py).
//
// Each block of 32 weights is expanded in registers to the bf16 values the file's dequantization gives,
// rounded once from fp32 as gguf-py computes them: for Q4, a 16-entry table per block (one FMA over 0..15,
// rounded to bf16 to nearest even) indexed by the 4-bit levels. Those are the very weights the bf16 model
// holds, so the product is the dense bf16 path's up to the fp32 accumulation order. Decode then streams the
// file's bytes (5 per 8 weights for Q4_1) instead of bf16's 16.
//
// A format is a small traits struct (Q4Format, Q8Format below; the K-quants' beside them): its bytes per
// row, its per-row scales widened once to fp32 (2 floats per 32 weights, kept in L1), and how it expands a
// pair of 32-weight blocks into two registers of 32 bf16, in an order x is permuted into once a call. For
// Q4_0/Q4_1 blocks b and b+1, the 32 bytes of levels give A = [b 0..15 | b+1 0..15] (low nibbles) and B =
// [b 16..31 | b+1 16..31] (high nibbles); the K-quants expand in the weights' own order.
//
// Where AMX is allowed and present, every call (1-16 rows) goes through tiles: 16 weight rows' block pair is
// expanded into two 16x32 bf16 tiles, and x^T, in the same order and in AMX's pair-interleaved layout, is the
// other operand; one tile multiply-add then serves all the activation rows. Elsewhere the rows multiply in
// AVX512-BF16 registers, in groups of 8, 4 and the rest. Either way one path serves every row count, and
// each (weight row, activation row) sum runs alike whatever else the call holds.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "amx_tiles.h"
#include "transpose16.h"

namespace mooncake_avx512 {


constexpr int64_t kPrefetchBytes = 2048;  // ~7 rows of a 576-wide matrix ahead: measured best of 0/512/2048

// (d, m) per block as the GGUF stores them: fp16 bits (exact in fp32; the loader checks they fit).
inline constexpr auto kDmType = at::kHalf;

inline __m512 scaled_int8(const uint8_t* q, float d) {
  __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
  return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), _mm512_set1_ps(d));
}

// The bf16 weights of block pair (b, b+1) of one row: *wa = [b 0..15 | b+1 0..15], *wb = [b 16..31 | b+1
// 16..31] (for Q4, the low and the high nibbles).
template <bool Q8>
inline void expand_pair(const uint8_t* q, const float* s, __m512i* wa, __m512i* wb) {
  _mm_prefetch(reinterpret_cast<const char*>(q + kPrefetchBytes), _MM_HINT_T0);
  if constexpr (Q8) {  // d * q is exact in fp32 (11 x 8 significant bits): one rounding, to bf16
    *wa = (__m512i)_mm512_cvtne2ps_pbh(scaled_int8(q + 32, s[2]), scaled_int8(q, s[0]));
    *wb = (__m512i)_mm512_cvtne2ps_pbh(scaled_int8(q + 48, s[2]), scaled_int8(q + 16, s[0]));
    return;
  }
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i upper_half = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(16), 1);
  const __m256i low_nibble = _mm256_set1_epi8(0x0F);
  __m512 table0 = _mm512_fmadd_ps(_mm512_set1_ps(s[0]), iota, _mm512_set1_ps(s[1]));
  __m512 table1 = _mm512_fmadd_ps(_mm512_set1_ps(s[2]), iota, _mm512_set1_ps(s[3]));
  __m512i table = (__m512i)_mm512_cvtne2ps_pbh(table1, table0);
  __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  __m256i lo = _mm256_and_si256(bytes, low_nibble);
  __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low_nibble);
  *wa = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_cvtepu8_epi16(lo), upper_half), table);
  *wb = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_cvtepu8_epi16(hi), upper_half), table);
}

// Scales and minimums of one row, fp16 -> fp32 (exact) once per row, so the block loop broadcasts them
// straight from L1 as it would fp32 ones while the stream from memory stays the file's 4 bytes per block.
inline constexpr int64_t kMaxDm = 2048;  // (d, m) values per row: inputs up to 32768 wide

inline void widen_dm(const uint16_t* src, float* dst, int64_t count) {
  int64_t i = 0;
  for (; i + 16 <= count; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  for (; i < count; ++i) dst[i] = _cvtsh_ss(src[i]);
}

// Q4_0/Q4_1: levels [n, k / 2] of nibbles, dm [n, k / 32 * 2] fp16 (d, m) per block.
struct Q4Format {
  static constexpr bool kPermuteX = true;
  static int64_t row_bytes(int64_t k) { return k / 2; }
  static void row_scales(const uint8_t*, const uint16_t* dm, float* dst, int64_t k) { widen_dm(dm, dst, k / 16); }
  static void expand(const uint8_t* row, int64_t b, const float* s, __m512i* wa, __m512i* wb) {
    expand_pair<false>(row + b * 16, s, wa, wb);
  }
};

// Q8_0 (split): levels [n, k] int8, dm [n, k / 32 * 2] fp16 (d, 0) per block.
struct Q8Format {
  static constexpr bool kPermuteX = true;
  static int64_t row_bytes(int64_t k) { return k; }
  static void row_scales(const uint8_t*, const uint16_t* dm, float* dst, int64_t k) { widen_dm(dm, dst, k / 16); }
  static void expand(const uint8_t* row, int64_t b, const float* s, __m512i* wa, __m512i* wb) {
    expand_pair<true>(row + b * 32, s, wa, wb);
  }
};

// dm: the split formats' fp16 (d, m) pairs; nullptr for formats whose rows carry their own scales.
inline const uint16_t* row_dm(const uint16_t* dm, int64_t row, int64_t k) {
  return dm == nullptr ? nullptr : dm + row * (k / 16);
}

template <class Fmt, int M, int R>
inline void dot_rows(const uint8_t* levels, const uint16_t* dm, const uint16_t* xp, float* y, int64_t n,
                     int64_t k, int64_t n_total) {
  const int64_t blocks = k / 32;
  alignas(64) float scales[R][kMaxDm];
  const uint8_t* rows[R];
  for (int r = 0; r < R; ++r) {
    rows[r] = levels + (n + r) * Fmt::row_bytes(k);
    Fmt::row_scales(rows[r], row_dm(dm, n + r, k), scales[r], k);
  }
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; b += 2) {
    for (int r = 0; r < R; ++r) {
      __m512i wa, wb;
      Fmt::expand(rows[r], b, scales[r] + b * 2, &wa, &wb);
      for (int m = 0; m < M; ++m) {
        const uint16_t* x = xp + m * k + b * 32;
        acc[r][m] = _mm512_dpbf16_ps(acc[r][m], (__m512bh)wa, (__m512bh)_mm512_loadu_si512(x));
        acc[r][m] = _mm512_dpbf16_ps(acc[r][m], (__m512bh)wb, (__m512bh)_mm512_loadu_si512(x + 32));
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) y[m * n_total + n + r] = _mm512_reduce_add_ps(acc[r][m]);
}

template <class Fmt, int M>
void dot_all(const uint8_t* levels, const uint16_t* dm, const uint16_t* xp, float* y, int64_t k, int64_t n) {
  // Two rows at a time for instruction-level parallelism; an odd last row alone.
  at::parallel_for(0, (n + 1) / 2, 32, [&](int64_t begin, int64_t end) {
    for (int64_t pair = begin; pair < end; ++pair) {
      const int64_t row = pair * 2;
      if (row + 1 < n) {
        dot_rows<Fmt, M, 2>(levels, dm, xp, y, row, k, n);
      } else {
        dot_rows<Fmt, M, 1>(levels, dm, xp, y, row, k, n);
      }
    }
  });
}

// Block pairs expanded ahead of their tile products, a chunk at a time into one of two buffers (2 x 16 KiB,
// in L1), and each row's levels read 8 block pairs at a time: one row took 1.7x the register path's time
// through the head when a single buffer was filled and loaded for every block pair, 1.2x this way (two
// groups of weight rows with two accumulator chains, or expanding a chunk ahead of the products, measured no
// better: docs/design/determinism.md). No element's sum changes: each accumulates from zero over the same
// block pairs in the same order.
inline constexpr int64_t kChunkPairs = 8;

// Output rows [16 g0, 16 g1): tmm0 accumulates 16 weight rows x 16 activation rows; tmm1/tmm3 hold a block
// pair's two weight tiles, tmm2/tmm4 the matching x^T tiles (bt: per tile, 16 pairs x 16 rows of 2 bf16).
template <class Fmt>
void amx_groups(const uint8_t* levels, const uint16_t* dm, const uint32_t* bt, float* y, int64_t g0, int64_t g1,
                int64_t rows, int64_t k, int64_t n) {
  const int64_t blocks = k / 32;
  constexpr int64_t kTile = 2 * 16 * 32;  // bf16 of a block pair's two weight tiles
  alignas(64) uint16_t a[2][kChunkPairs * kTile];
  alignas(64) float c[16 * 16];
  std::vector<float> scales(16 * blocks * 2);
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t n0 = g * 16;
    const uint8_t* rows_of[16] = {};
    for (int r = 0; r < 16 && n0 + r < n; ++r) {
      rows_of[r] = levels + (n0 + r) * Fmt::row_bytes(k);
      Fmt::row_scales(rows_of[r], row_dm(dm, n0 + r, k), scales.data() + r * blocks * 2, k);
    }
    _tile_zero(0);
    int buffer = 0;
    for (int64_t b0 = 0; b0 < blocks; b0 += 2 * kChunkPairs, buffer ^= 1) {
      const int64_t pairs = std::min<int64_t>(kChunkPairs, (blocks - b0) / 2);
      uint16_t* chunk = a[buffer];
      for (int r = 0; r < 16; ++r) {
        for (int64_t p = 0; p < pairs; ++p) {
          __m512i wa = _mm512_setzero_si512(), wb = _mm512_setzero_si512();
          const int64_t b = b0 + 2 * p;
          if (n0 + r < n) Fmt::expand(rows_of[r], b, scales.data() + (r * blocks + b) * 2, &wa, &wb);
          _mm512_store_si512(chunk + p * kTile + r * 32, wa);
          _mm512_store_si512(chunk + p * kTile + (16 + r) * 32, wb);
        }
      }
      for (int64_t p = 0; p < pairs; ++p) {
        const int64_t b = b0 + 2 * p;
        _tile_loadd(1, chunk + p * kTile, 64);
        _tile_loadd(2, bt + b * 256, 64);
        _tile_loadd(3, chunk + p * kTile + 512, 64);
        _tile_loadd(4, bt + (b + 1) * 256, 64);
        _tile_dpbf16ps(0, 1, 2);
        _tile_dpbf16ps(0, 3, 4);
      }
    }
    _tile_stored(0, c, 64);
    if (n0 + 16 <= n) {  // c[r][m] transposed: one store per row of y instead of 16 scattered ones
      __m512i words[16];
      for (int r = 0; r < 16; ++r) words[r] = _mm512_load_si512(c + r * 16);
      transpose16(words);
      for (int64_t m = 0; m < rows; ++m) _mm512_storeu_si512(y + m * n + n0, words[m]);
      continue;
    }
    for (int r = 0; r < 16 && n0 + r < n; ++r)
      for (int64_t m = 0; m < rows; ++m) y[m * n + n0 + r] = c[r * 16 + m];
  }
}

template <class Fmt>
void amx_all(const uint16_t* xp, const uint8_t* levels, const uint16_t* dm, float* y, int64_t rows, int64_t k,
             int64_t n) {
  // x^T in tile order: bt[pair][m] = the two bf16 of xp row m at that pair; rows past x stay zero.
  std::vector<uint32_t> bt(k / 2 * 16, 0);
  const auto* xp32 = reinterpret_cast<const uint32_t*>(xp);
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t pair = 0; pair < k / 2; ++pair) bt[pair * 16 + m] = xp32[m * (k / 2) + pair];
  at::parallel_for(0, (n + 15) / 16, 1, [&](int64_t g0, int64_t g1) {
    // Tile configuration is per thread. The x^T and accumulator tiles are only as wide as the call's rows:
    // a single row loads 64 bytes of x^T per tile instead of 1 KiB. Each element's sum is the same at any
    // width (the tests compare every row count).
    TileConfig config = full_tiles(5);
    for (int t : {0, 2, 4}) config.colsb[t] = static_cast<uint16_t>(4 * rows);
    _tile_loadconfig(&config);
    amx_groups<Fmt>(levels, dm, bt.data(), y, g0, g1, rows, k, n);
    _tile_release();
  });
}

// Either way 16: AMX tiles, or register groups of 8 (at 16 rows still well under oneDNN's packed bf16 step here).
inline int64_t max_rows(bool) { return 16; }

template <class Fmt>
void register_rows(const uint16_t* xs, const uint8_t* q, const uint16_t* s, float* ys, int64_t rows, int64_t k,
                   int64_t n) {
  switch (rows) {
    case 1: dot_all<Fmt, 1>(q, s, xs, ys, k, n); break;
    case 2: dot_all<Fmt, 2>(q, s, xs, ys, k, n); break;
    case 3: dot_all<Fmt, 3>(q, s, xs, ys, k, n); break;
    case 4: dot_all<Fmt, 4>(q, s, xs, ys, k, n); break;
    default: dot_all<Fmt, 8>(q, s, xs, ys, k, n); break;
  }
}

template <class Fmt>
void multiply(const uint16_t* xs, const uint8_t* q, const uint16_t* s, float* ys, int64_t rows, int64_t k,
              int64_t n, bool amx) {
  // Every row count takes the same path (amx_tiles.h), so a row's bits never depend on how many rows share its
  // call. Tiles cost 1.2-2.3x the registers' time at one row and 0.35-0.46x at 16
  // (docs/design/determinism.md): which path is the caller's choice (EngineConfig.q4_amx, off by default).
  if (amx && amx_available()) {
    amx_all<Fmt>(xs, q, s, ys, rows, k, n);
    return;
  }
  // Groups of 8 rows share each expanded block pair (16 in one group measured slower:
  // docs/design/gguf-blocks.md); a rest of 5-7 goes as 4 and the remainder.
  for (int64_t done = 0; done < rows;) {
    const int64_t left = rows - done;
    const int64_t group = left >= 8 ? 8 : (left > 4 ? 4 : left);
    register_rows<Fmt>(xs + done * k, q, s, ys + done * n, group, k, n);
    done += group;
  }
}

// x [rows, k] bf16 in the nibbles' order, once per call: within each 64 columns, [0..15 | 32..47 | 16..31 |
// 48..63], the order the expanded block pairs come in.
inline void permute_x(const uint16_t* x, uint16_t* xp, int64_t rows, int64_t k) {
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t c = 0; c < k; c += 64)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
          for (int l = 0; l < 16; ++l) xp[m * k + c + i * 32 + j * 16 + l] = x[m * k + c + j * 32 + i * 16 + l];
}

}  // namespace mooncake_avx512
