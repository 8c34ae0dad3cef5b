// One product of decoding rows with a K-quant matrix in integers, whichever kernel takes it: the registers
// (kquant_int8.h, kquant_int16.h) or, from kIntegerTileRows rows on a CPU with AMX-INT8, the tiles
// (kquant_tiles.h), to the same bits. Shared by the kquant ops (kquant_linear.cpp) and the fused decode
// layers (decode_layers.cpp), so a row gets one answer on either.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include "kquant_formats.h"
#include "kquant_int16.h"
#include "kquant_int8.h"
#include "kquant_tiles.h"
#include "block_kernels.h"

namespace mooncake_avx512 {

// ggml's type ids, as gguf-py's GGMLQuantizationType numbers them.
constexpr int64_t kQ4K = 12, kQ5K = 13, kQ6K = 14, kIQ4XS = 23;

// How decoding rows' activations meet the K-quant levels (quantization/gguf/avx512.py's KQUANT_ACTIVATIONS_OP).
enum Activations : int64_t { kBf16 = 0, kInt8 = 1, kInt16 = 2 };

// Which integer kernel takes a call: tiles from kIntegerTileRows rows where the CPU has AMX-INT8 (kAuto),
// or one of them at any row count (the tests hold them to the same bits).
enum class IntegerPath { kAuto, kRegisters, kTiles };

template <class F>
auto with_format(int64_t kind, F&& f) {
  switch (kind) {
    case kQ4K: return f(Q4KFormat{});
    case kQ5K: return f(Q5KFormat{});
    case kQ6K: return f(Q6KFormat{});
    case kIQ4XS: return f(IQ4XSFormat{});
  }
  TORCH_CHECK(false, "not a K-quant type id: ", kind);
}

// The integer kernels' view of a K-quant type (kquant_levels.h).
template <class F>
void with_levels(int64_t kind, F&& f) {
  switch (kind) {
    case kQ4K: f(Q4KLevels{}); break;
    case kQ5K: f(Q5KLevels{}); break;
    case kQ6K: f(Q6KLevels{}); break;
    case kIQ4XS: f(IQ4XSLevels{}); break;
    default: TORCH_CHECK(false, "not a K-quant type id: ", kind);
  }
}

// The rows of `raw` ([out, super-blocks * bytes] uint8), checked against the input size k.
inline int64_t checked_rows(const at::Tensor& raw, int64_t kind, int64_t k) {
  TORCH_CHECK(raw.dim() == 2 && raw.scalar_type() == at::kByte && raw.is_contiguous(),
              "raw must be contiguous uint8 [out, bytes per row]");
  TORCH_CHECK(k > 0 && k % 256 == 0 && k / 16 <= kMaxDm, "input size must be a multiple of 256, at most ",
              kMaxDm * 16, ", got ", k);
  const int64_t row_bytes = with_format(kind, [&](auto format) { return decltype(format)::row_bytes(k); });
  TORCH_CHECK(raw.size(1) == row_bytes, "rows of ", raw.size(1), " bytes do not hold ", k, " weights");
  return raw.size(0);
}

// One input's activation rows (bf16 bits), quantized on first use in the form the kernel that reads them
// needs and kept for the next matrix with the same input: a projection's parts (q, k and v; gate and up)
// quantize and lay out their input once. int8 or int16 (`activations`), per super-block.
class IntegerActivations {
 public:
  IntegerActivations(const uint16_t* xs, int64_t rows, int64_t k, int64_t activations)
      : xs_(xs), rows_(rows), k_(k), activations_(activations) {}

  int64_t rows() const { return rows_; }
  int64_t k() const { return k_; }
  bool wide() const { return activations_ == kInt16; }
  bool on_tiles(IntegerPath path) const {
    return path == IntegerPath::kTiles ||
           (path == IntegerPath::kAuto && rows_ >= kIntegerTileRows && amx_int8_available());
  }
  const QuantizedRows& narrow_rows() {
    if (!narrow_) narrow_ = quantize_rows(xs_, rows_, k_);
    return *narrow_;
  }
  const Quantized16& wide_rows() {
    if (!wide_) wide_ = quantize_rows16(xs_, rows_, k_, true);
    return *wide_;
  }
  const TileActivations& tile_layout() {
    if (!tiles_) {
      if (wide()) {
        const Quantized16 q = quantize_rows16(xs_, rows_, k_, false);
        tiles_ = tile_activations(q.q.data(), nullptr, q.d.data(), rows_, k_);
      } else {
        const QuantizedRows& q = narrow_rows();
        tiles_ = tile_activations(nullptr, q.q.data(), q.d.data(), rows_, k_);
      }
    }
    return *tiles_;
  }

 private:
  const uint16_t* xs_;
  int64_t rows_, k_, activations_;
  std::optional<QuantizedRows> narrow_;
  std::optional<Quantized16> wide_;
  std::optional<TileActivations> tiles_;
};

// y [rows, n] fp32 = x @ W^T for the K-quant matrix q ([n, k]) of type `kind`.
inline void integer_multiply(IntegerActivations& x, const uint8_t* q, int64_t kind, IntegerPath path, float* ys,
                             int64_t n) {
  const bool tiles = x.on_tiles(path);
  const int64_t rows = x.rows(), k = x.k();
  with_levels(kind, [&](auto levels) {
    using Levels = decltype(levels);
    if (tiles) {
      tile_multiply<Levels>(x.tile_layout(), q, ys, rows, k, n, x.wide());
    } else if (x.wide()) {
      int16_multiply<Levels>(x.wide_rows(), q, ys, rows, k, n);
    } else {
      int8_multiply<Levels>(x.narrow_rows(), q, ys, rows, k, n);
    }
  });
}

}  // namespace mooncake_avx512
