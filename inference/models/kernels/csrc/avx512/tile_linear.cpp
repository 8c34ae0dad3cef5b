// tile_linear: y = x @ W^T (+ bias) for bf16 activations x [rows, k] and a dense bf16 weight W [n, k] packed
// once into AMX tiles (quantization/amx_tiles.py), on CPUs with AMX.
//
// Why not oneDNN's prepacked linear there: its AMX kernels block the reduction by the row count, so a
// prompt's logits depended on how the prompt was cut into chunks (measured: rows 3-52 of a 576-wide
// projection differ in bits from the same rows in a 512-row call). Here every output element starts from
// zero and takes the same tile multiply-adds (TDPBF16PS) over K blocks 0, 1, ... in order, whatever the row
// count, the blocking or the thread that computes it (amx_tiles.h): a row gets the same bits at any batch.
//
// Layout: W is packed as [n / 16][k / 32] tiles of 16 pairs x 16 weight rows x 2 bf16 (AMX's B operand),
// zero past W; x rows are the A operand as they lie (a copy padded with zeros only where k % 32 != 0).
// Two activation tiles x two weight tiles share each K step's loads; a tail of fewer than 16 rows runs with
// tiles configured to its row count, so nothing is read or written past x and y.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

#include "amx_tiles.h"

namespace mooncake_avx512 {
namespace {

constexpr int64_t kRows = 16;  // rows of a tile: activation rows of A and C, K pairs of B
constexpr int64_t kDepth = 32;  // bf16 per K block: one 64-byte tile row

int64_t blocks(int64_t size, int64_t block) { return (size + block - 1) / block; }

at::Tensor pack_tiles(const at::Tensor& weight) {
  TORCH_CHECK(weight.dim() == 2 && weight.scalar_type() == at::kBFloat16, "weight must be 2-D bf16");
  const at::Tensor w = weight.contiguous();
  const int64_t n = w.size(0), k = w.size(1), nb = blocks(n, kRows), kb = blocks(k, kDepth);
  at::Tensor packed = at::zeros({nb, kb, kRows, kRows, 2}, w.options());
  const auto* src = reinterpret_cast<const uint16_t*>(w.data_ptr());
  auto* dst = reinterpret_cast<uint16_t*>(packed.data_ptr());
  at::parallel_for(0, nb, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int64_t r = 0; r < kRows && b * kRows + r < n; ++r)
        for (int64_t c = 0; c < k; ++c) {
          const int64_t tile = b * kb + c / kDepth, pair = (c % kDepth) / 2;
          dst[((tile * kRows + pair) * kRows + r) * 2 + c % 2] = src[(b * kRows + r) * k + c];
        }
  });
  return packed;
}

// C tiles 0..3 (activation tile i, weight tile j at i * 2 + j), A tiles 4-5, B tiles 6-7.
TileConfig config_for(int64_t rows) {
  TileConfig config = full_tiles(8);
  for (int t = 0; t < 6; ++t) config.rows[t] = static_cast<uint8_t>(rows);
  return config;
}

// MT activation tiles of `rows` rows from row m0, NT weight tiles from weight tile nt0: y rows m0.., columns
// 16 * nt0.. . The callers keep the tile configuration at `rows`; the product stays in fp32 until y.
template <int MT, int NT>
void block(const uint16_t* x, int64_t kp, const uint16_t* w, int64_t kb, const float* bias, uint16_t* y,
           int64_t n, int64_t m0, int64_t rows, int64_t nt0) {
  _tile_zero(0);
  if constexpr (NT == 2) _tile_zero(1);
  if constexpr (MT == 2) _tile_zero(2);
  if constexpr (MT == 2 && NT == 2) _tile_zero(3);
  constexpr int64_t kTile = kRows * kRows * 2;  // bf16 per packed weight tile
  for (int64_t t = 0; t < kb; ++t) {
    _tile_loadd(4, x + m0 * kp + t * kDepth, kp * 2);
    _tile_loadd(6, w + (nt0 * kb + t) * kTile, 64);
    if constexpr (NT == 2) _tile_loadd(7, w + ((nt0 + 1) * kb + t) * kTile, 64);
    if constexpr (MT == 2) _tile_loadd(5, x + (m0 + kRows) * kp + t * kDepth, kp * 2);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NT == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MT == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (MT == 2 && NT == 2) _tile_dpbf16ps(3, 5, 7);
  }
  alignas(64) float c[4][kRows * kRows];
  _tile_stored(0, c[0], 64);
  if constexpr (NT == 2) _tile_stored(1, c[1], 64);
  if constexpr (MT == 2) _tile_stored(2, c[2], 64);
  if constexpr (MT == 2 && NT == 2) _tile_stored(3, c[3], 64);
  // + bias in fp32, then the one rounding to bf16 (nearest even), 16 columns at a time.
  for (int j = 0; j < NT; ++j) {
    const int64_t n0 = (nt0 + j) * kRows;
    const __mmask16 valid = n - n0 >= kRows ? 0xFFFF : static_cast<__mmask16>((1u << (n - n0)) - 1);
    const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(valid, bias + n0) : _mm512_setzero_ps();
    for (int i = 0; i < MT; ++i)
      for (int64_t r = 0; r < rows; ++r) {
        const __m512 sum = _mm512_add_ps(_mm512_load_ps(c[i * 2 + j] + r * kRows), b);
        _mm256_mask_storeu_epi16(y + (m0 + i * kRows + r) * n + n0, valid, (__m256i)_mm512_cvtneps_pbh(sum));
      }
  }
}

// Weight tiles that stay in L2 while every activation row passes over them: x is then read once per group
// rather than once per pair of weight tiles (measured: a 512-row prompt through a 16384 x 2048 projection).
constexpr int64_t kGroupBytes = 512 * 1024;

template <int MT>
void unit(const uint16_t* x, int64_t kp, const uint16_t* w, int64_t kb, const float* bias, uint16_t* y,
          int64_t n, int64_t nb, int64_t m0, int64_t rows, int64_t pair) {
  if (2 * pair + 1 < nb) {
    block<MT, 2>(x, kp, w, kb, bias, y, n, m0, rows, 2 * pair);
  } else {
    block<MT, 1>(x, kp, w, kb, bias, y, n, m0, rows, 2 * pair);
  }
}

// Weight tile pairs [p0, p1) against every row of x, a group of pairs at a time.
void pairs(const uint16_t* x, int64_t kp, const uint16_t* w, int64_t kb, const float* bias, uint16_t* y,
           int64_t n, int64_t nb, int64_t rows, int64_t p0, int64_t p1) {
  const int64_t group = std::max<int64_t>(1, kGroupBytes / (2 * kRows * kp * 2));
  const int64_t whole = rows / kRows, tail = rows % kRows;
  for (int64_t g0 = p0; g0 < p1; g0 += group) {
    const int64_t g1 = std::min(p1, g0 + group);
    int64_t m = 0;
    for (; m + 2 <= whole; m += 2)
      for (int64_t pair = g0; pair < g1; ++pair) unit<2>(x, kp, w, kb, bias, y, n, nb, m * kRows, kRows, pair);
    if (m < whole)
      for (int64_t pair = g0; pair < g1; ++pair) unit<1>(x, kp, w, kb, bias, y, n, nb, m * kRows, kRows, pair);
    if (tail) {
      const TileConfig config = config_for(tail);
      _tile_loadconfig(&config);
      for (int64_t pair = g0; pair < g1; ++pair) unit<1>(x, kp, w, kb, bias, y, n, nb, whole * kRows, tail, pair);
      const TileConfig full = config_for(kRows);
      _tile_loadconfig(&full);
    }
  }
}

at::Tensor tile_linear(const at::Tensor& x, const at::Tensor& packed, int64_t n, const c10::optional<at::Tensor>& bias) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16, "x must be 2-D bf16");
  TORCH_CHECK(packed.dim() == 5 && packed.scalar_type() == at::kBFloat16 && packed.is_contiguous() &&
                  packed.size(2) == kRows && packed.size(3) == kRows && packed.size(4) == 2,
              "packed must come from pack_tiles");
  const int64_t rows = x.size(0), k = x.size(1), nb = packed.size(0), kb = packed.size(1);
  TORCH_CHECK(kb == blocks(k, kDepth) && n >= 1 && nb == blocks(n, kRows), "x or n does not match the packed weight");
  TORCH_CHECK(amx_available(), "tile_linear needs AMX");
  at::Tensor y = at::empty({rows, n}, x.options());
  at::Tensor b;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->numel() == n, "bias must have n values");
    b = bias->to(at::kFloat).contiguous();
  }
  if (rows > 0) {
    const int64_t kp = kb * kDepth;
    at::Tensor xs = x.contiguous();
    if (kp != k) xs = at::constant_pad_nd(xs, {0, kp - k}, 0);
    const auto* xd = reinterpret_cast<const uint16_t*>(xs.data_ptr());
    const auto* w = reinterpret_cast<const uint16_t*>(packed.data_ptr());
    const float* bd = b.defined() ? b.data_ptr<float>() : nullptr;
    auto* yd = reinterpret_cast<uint16_t*>(y.data_ptr());
    at::parallel_for(0, blocks(nb, 2), 1, [&](int64_t p0, int64_t p1) {
      const TileConfig config = config_for(kRows);  // tile configuration is per thread
      _tile_loadconfig(&config);
      pairs(xd, kp, w, kb, bd, yd, n, nb, rows, p0, p1);
      _tile_release();
    });
  }
  return y;
}

}  // namespace
}  // namespace mooncake_avx512

TORCH_LIBRARY_IMPL(mooncake_avx512, CPU, m) {
  m.impl("pack_tiles", &mooncake_avx512::pack_tiles);
  m.impl("tile_linear", &mooncake_avx512::tile_linear);
}
