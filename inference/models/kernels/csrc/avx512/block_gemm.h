// Batches of any size from a GGUF's blocks (block_kernels.h's formats): prompt chunks and decode batches past
// the decode path's 16 rows, so a model need not keep a dense bf16 copy beside the blocks.
//
// With AMX, the weight rows are expanded a group of 16 at a time, straight into AMX's B layout (16 K pairs x
// 16 rows), as many groups as fit in L2; every group of 16 activation rows (the A operand, x as it lies)
// then passes over them, two by two as tile_linear.cpp blocks. Each output element starts from zero and
// takes the same tile multiply-adds over K blocks 0, 1, ... in order whatever the row count, so a row's bits
// never depend on its batch, and every row count takes this path (a prompt's logits do not depend on how it
// was cut into chunks). Without AMX the register path (groups of 8 rows) takes any row count as it is.
#pragma once

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "amx_tiles.h"
#include "block_kernels.h"
#include "transpose16.h"

namespace mooncake_avx512 {

constexpr int64_t kTileWords = 16 * 16;  // one tile of 16 rows x 64 bytes, in 32-bit words

// Rows [n0, n0 + 16) of W in AMX's B layout: block t (32 weights along K) is a tile at t * kTileWords whose
// word [p * 16 + r] holds weights 2p and 2p + 1 of row r, in the order expand() gives them (for Q4_0/Q4_1, x
// is permuted to match). Zero past n. The rows are expanded into `rows` (16 x k bf16) first, then each
// block's 16 x 16 words are transposed in registers.
template <class Fmt>
void expand_group(const uint8_t* levels, const uint16_t* dm, int64_t n0, int64_t k, int64_t n, float* scales,
                  uint32_t* rows, uint32_t* out) {
  const int64_t blocks = k / 32, words = k / 2;
  for (int r = 0; r < 16; ++r) {
    uint32_t* expanded = rows + r * words;
    if (n0 + r >= n) {
      std::fill_n(expanded, words, 0u);
      continue;
    }
    const uint8_t* row = levels + (n0 + r) * Fmt::row_bytes(k);
    Fmt::row_scales(row, row_dm(dm, n0 + r, k), scales, k);
    for (int64_t b = 0; b < blocks; b += 2) {
      __m512i wa, wb;
      Fmt::expand(row, b, scales + b * 2, &wa, &wb);
      _mm512_storeu_si512(expanded + b * 16, wa);
      _mm512_storeu_si512(expanded + (b + 1) * 16, wb);
    }
  }
  __m512i tile[16];
  for (int64_t t = 0; t < blocks; ++t) {
    for (int r = 0; r < 16; ++r) tile[r] = _mm512_loadu_si512(rows + r * words + t * 16);
    transpose16(tile);
    for (int p = 0; p < 16; ++p) _mm512_storeu_si512(out + t * kTileWords + p * 16, tile[p]);
  }
}

// AT activation groups (A tiles 4-5, rows of x from x0 with a row stride of k bf16) x WT weight groups (B
// tiles 6-7) into C tiles 0-3 (activation group i, weight group j at i * 2 + j), every accumulator from
// zero over blocks 0, 1, ... in order; c receives the four results.
template <int AT, int WT>
void tile_block(const uint16_t* x0, int64_t k, const uint32_t* w0, const uint32_t* w1, float (*c)[256]) {
  _tile_zero(0);
  if constexpr (WT == 2) _tile_zero(1);
  if constexpr (AT == 2) _tile_zero(2);
  if constexpr (AT == 2 && WT == 2) _tile_zero(3);
  for (int64_t t = 0; t < k / 32; ++t) {
    _tile_loadd(4, x0 + t * 32, k * 2);
    _tile_loadd(6, w0 + t * kTileWords, 64);
    if constexpr (WT == 2) _tile_loadd(7, w1 + t * kTileWords, 64);
    if constexpr (AT == 2) _tile_loadd(5, x0 + 16 * k + t * 32, k * 2);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (WT == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (AT == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (AT == 2 && WT == 2) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c[0], 64);
  if constexpr (WT == 2) _tile_stored(1, c[1], 64);
  if constexpr (AT == 2) _tile_stored(2, c[2], 64);
  if constexpr (AT == 2 && WT == 2) _tile_stored(3, c[3], 64);
}

// Activation groups [a0, a1) of `width` rows against the `wgroups` expanded weight groups from row n0: each
// pair of activation groups passes over every expanded group while it stays in L2.
inline void tile_products(const uint16_t* xp, int64_t k, const uint32_t* expanded, int64_t wgroups, int64_t a0,
                          int64_t a1, int64_t width, const float* bias, uint16_t* y, int64_t n0, int64_t n) {
  alignas(64) float c[4][256];
  const int64_t group_words = k / 32 * kTileWords;
  for (int64_t a = a0; a < a1; a += 2) {
    const uint16_t* x0 = xp + a * 16 * k;
    const int acts = a + 1 < a1 ? 2 : 1;
    for (int64_t g = 0; g < wgroups; g += 2) {
      const uint32_t* w0 = expanded + g * group_words;
      const int weights = g + 1 < wgroups ? 2 : 1;
      if (acts == 2 && weights == 2) tile_block<2, 2>(x0, k, w0, w0 + group_words, c);
      if (acts == 2 && weights == 1) tile_block<2, 1>(x0, k, w0, nullptr, c);
      if (acts == 1 && weights == 2) tile_block<1, 2>(x0, k, w0, w0 + group_words, c);
      if (acts == 1 && weights == 1) tile_block<1, 1>(x0, k, w0, nullptr, c);
      for (int j = 0; j < weights; ++j) {
        const int64_t first = n0 + (g + j) * 16;
        const __mmask16 valid = n - first >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - first)) - 1);
        const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(valid, bias + first) : _mm512_setzero_ps();
        // + bias in fp32, then the one rounding to bf16 (nearest even), as the decode path and oneDNN do.
        for (int i = 0; i < acts; ++i)
          for (int64_t m = 0; m < width; ++m) {
            const __m512 sum = _mm512_add_ps(_mm512_load_ps(c[i * 2 + j] + m * 16), b);
            _mm256_mask_storeu_epi16(y + ((a + i) * 16 + m) * n + first, valid, (__m256i)_mm512_cvtneps_pbh(sum));
          }
      }
    }
  }
}

// Expanded weights a thread keeps in L2 while the activations pass over them.
constexpr int64_t kExpandedBytes = 512 * 1024;

// y [rows, n] bf16 = x @ W^T + bias (bias fp32 or nullptr).
template <class Fmt>
void amx_wide(const uint16_t* xp, const uint8_t* levels, const uint16_t* dm, const float* bias, uint16_t* y,
              int64_t rows, int64_t k, int64_t n) {
  const int64_t group_words = k / 32 * kTileWords;
  // Groups of 16 weight rows, as many at a time (an even number, at least 2) as fit kExpandedBytes.
  const int64_t per_chunk = std::max<int64_t>(2, kExpandedBytes / (group_words * 4) / 2 * 2);
  const int64_t wgroups_total = (n + 15) / 16, chunks = (wgroups_total + per_chunk - 1) / per_chunk;
  const int64_t whole = rows / 16, rest = rows % 16;
  at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
    std::vector<uint32_t> expanded(per_chunk * group_words), rows_buffer(16 * k / 2);
    std::vector<float> scales(k / 16);
    for (int64_t chunk = c0; chunk < c1; ++chunk) {
      const int64_t g0 = chunk * per_chunk, wgroups = std::min(per_chunk, wgroups_total - g0);
      for (int64_t g = 0; g < wgroups; ++g)
        expand_group<Fmt>(levels, dm, (g0 + g) * 16, k, n, scales.data(), rows_buffer.data(),
                          expanded.data() + g * group_words);
      TileConfig config = full_tiles(8);
      _tile_loadconfig(&config);
      tile_products(xp, k, expanded.data(), wgroups, 0, whole, 16, bias, y, g0 * 16, n);
      if (rest) {
        // The last activation group's A and C tiles only as tall as its rows: nothing read past x.
        for (int t : {0, 1, 2, 3, 4, 5}) config.rows[t] = static_cast<uint8_t>(rest);
        _tile_loadconfig(&config);
        tile_products(xp, k, expanded.data(), wgroups, whole, whole + 1, rest, bias, y, g0 * 16, n);
      }
      _tile_release();
    }
  });
}

// y = x @ W^T + bias in bf16 for 1-16 decoding rows, or with `batch` any number: through amx_wide where tiles
// are allowed and present, else the register groups (fp32, then bias and one rounding, as oneDNN adds it).
template <class Fmt>
at::Tensor linear_rows(const at::Tensor& x, const uint16_t* xs, const uint8_t* q, const uint16_t* s,
                       const c10::optional<at::Tensor>& bias, int64_t n, bool amx, bool batch) {
  const int64_t rows = x.size(0), k = x.size(1);
  const bool has_bias = bias.has_value() && bias->defined();
  if (batch && amx && amx_available()) {
    auto y = at::empty({rows, n}, x.options());
    at::Tensor b = has_bias ? bias->to(at::kFloat).contiguous() : at::Tensor();
    amx_wide<Fmt>(xs, q, s, has_bias ? b.data_ptr<float>() : nullptr, reinterpret_cast<uint16_t*>(y.data_ptr()),
                  rows, k, n);
    return y;
  }
  auto y = at::empty({rows, n}, x.options().dtype(at::kFloat));
  multiply<Fmt>(xs, q, s, y.data_ptr<float>(), rows, k, n, amx && !batch);
  if (has_bias) y.add_(bias->to(at::kFloat));
  return y.to(at::kBFloat16);
}

}  // namespace mooncake_avx512
