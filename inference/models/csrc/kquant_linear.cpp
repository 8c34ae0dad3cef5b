// The kquant_linear, kquant_integer_linear and kquant_dequantize ops: a GGUF's Q4_K, Q5_K, Q6_K and IQ4_XS rows as the file stores them
// (formats in kquant_formats.h and kquant_levels.h; the bf16 kernels in q4_kernels.h and block_gemm.h, the
// integer ones for decoding rows in kquant_int8.h and kquant_int16.h; see q4_decode.py).
#include <torch/library.h>

#include "kquant_formats.h"
#include "block_gemm.h"
#include "kquant_int8.h"
#include "kquant_int16.h"
#include "kquant_tiles.h"

namespace mooncake_q4 {
namespace {

// ggml's type ids, as gguf-py's GGMLQuantizationType numbers them.
constexpr int64_t kQ4K = 12, kQ5K = 13, kQ6K = 14, kIQ4XS = 23;

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

// The rows of `raw` ([out, super-blocks * bytes] uint8), checked against the input size k.
int64_t checked_rows(const at::Tensor& raw, int64_t kind, int64_t k) {
  TORCH_CHECK(raw.dim() == 2 && raw.scalar_type() == at::kByte && raw.is_contiguous(),
              "raw must be contiguous uint8 [out, bytes per row]");
  TORCH_CHECK(k > 0 && k % 256 == 0 && k / 16 <= kMaxDm, "input size must be a multiple of 256, at most ",
              kMaxDm * 16, ", got ", k);
  const int64_t row_bytes = with_format(kind, [&](auto format) { return decltype(format)::row_bytes(k); });
  TORCH_CHECK(raw.size(1) == row_bytes, "rows of ", raw.size(1), " bytes do not hold ", k, " weights");
  return raw.size(0);
}

// How decoding rows' activations meet the K-quant levels (q4_decode.py's ACTIVATIONS, in that order).
enum Activations : int64_t { kBf16 = 0, kInt8 = 1, kInt16 = 2 };

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

// Which integer kernel takes a call: tiles from kIntegerTileRows rows where the CPU has AMX-INT8 (kAuto),
// or one of them at any row count (the tests hold them to the same bits).
enum class IntegerPath { kAuto, kRegisters, kTiles };

// Decoding rows with their activations quantized per super-block (kquant_int8.h, kquant_int16.h,
// kquant_tiles.h).
at::Tensor integer_linear(const uint16_t* xs, const uint8_t* q, int64_t kind, int64_t activations, IntegerPath path,
                          const c10::optional<at::Tensor>& bias, int64_t rows, int64_t k, int64_t n) {
  auto y = at::empty({rows, n}, at::TensorOptions().dtype(at::kFloat));
  float* ys = y.data_ptr<float>();
  const bool tiles = path == IntegerPath::kTiles ||
                     (path == IntegerPath::kAuto && rows >= kIntegerTileRows && amx_int8_available());
  with_levels(kind, [&](auto levels) {
    using Levels = decltype(levels);
    if (tiles) {
      tile_multiply<Levels>(xs, q, ys, rows, k, n, activations == kInt16);
    } else if (activations == kInt8) {
      int8_multiply<Levels>(xs, q, ys, rows, k, n);
    } else {
      int16_multiply<Levels>(xs, q, ys, rows, k, n);
    }
  });
  if (bias.has_value() && bias->defined()) y.add_(bias->to(at::kFloat));
  return y.to(at::kBFloat16);
}

// One integer path forced, for the tests: 1-16 rows, int8 (1) or int16 (2) activations, no bias.
at::Tensor kquant_integer_linear(const at::Tensor& x, const at::Tensor& raw, int64_t kind, int64_t activations,
                                 bool tiles) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16, "x must be 2-D bf16");
  TORCH_CHECK(activations == kInt8 || activations == kInt16, "activations must be 1 (int8) or 2 (int16)");
  TORCH_CHECK(!tiles || amx_int8_available(), "the tile path needs AMX-INT8");
  const int64_t rows = x.size(0), k = x.size(1);
  const int64_t n = checked_rows(raw, kind, k);
  TORCH_CHECK(rows >= 1 && rows <= 16, "1 to 16 rows, got ", rows);
  auto xc = x.contiguous();
  return integer_linear(reinterpret_cast<const uint16_t*>(xc.data_ptr()), raw.data_ptr<uint8_t>(), kind, activations,
                        tiles ? IntegerPath::kTiles : IntegerPath::kRegisters, c10::nullopt, rows, k, n);
}

at::Tensor kquant_linear(const at::Tensor& x, const at::Tensor& raw, int64_t kind,
                         const c10::optional<at::Tensor>& bias, bool amx, bool batch, int64_t activations) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16, "x must be 2-D bf16");
  const int64_t rows = x.size(0), k = x.size(1);
  const int64_t n = checked_rows(raw, kind, k);
  TORCH_CHECK(rows >= 1 && (batch || rows <= max_rows(amx)), "1 to ", max_rows(amx), " rows, got ", rows);
  auto xc = x.contiguous();
  const auto* xs = reinterpret_cast<const uint16_t*>(xc.data_ptr());
  const auto* q = raw.data_ptr<uint8_t>();
  TORCH_CHECK(activations >= kBf16 && activations <= kInt16, "activations must be 0 (bf16), 1 (int8) or 2 (int16)");
  if (activations != kBf16 && !batch) return integer_linear(xs, q, kind, activations, amx ? IntegerPath::kAuto : IntegerPath::kRegisters, bias, rows,
                                                          k, n);
  return with_format(kind, [&](auto format) {
    return linear_rows<decltype(format)>(xc, xs, q, nullptr, bias, n, amx, batch);
  });
}

// The bf16 weights [out, k] the kernels multiply with: gguf-py's dequantization rounded once to bf16.
at::Tensor kquant_dequantize(const at::Tensor& raw, int64_t kind, int64_t k) {
  const int64_t n = checked_rows(raw, kind, k);
  auto out = at::empty({n, k}, raw.options().dtype(at::kBFloat16));
  auto* dst = reinterpret_cast<uint16_t*>(out.data_ptr());
  const auto* src = raw.data_ptr<uint8_t>();
  with_format(kind, [&](auto format) {
    using Format = decltype(format);
    at::parallel_for(0, n, 16, [&](int64_t begin, int64_t end) {
      std::vector<float> scales(k / 16);
      for (int64_t row = begin; row < end; ++row) {
        const uint8_t* bytes = src + row * Format::row_bytes(k);
        Format::row_scales(bytes, nullptr, scales.data(), k);
        for (int64_t b = 0; b < k / 32; b += 2) {
          __m512i wa, wb;
          Format::expand(bytes, b, scales.data() + b * 2, &wa, &wb);
          _mm512_storeu_si512(dst + row * k + b * 32, wa);
          _mm512_storeu_si512(dst + row * k + b * 32 + 32, wb);
        }
      }
    });
    return 0;
  });
  return out;
}

}  // namespace
}  // namespace mooncake_q4

TORCH_LIBRARY_FRAGMENT(mooncake_q4, m) {
  m.def("kquant_linear(Tensor x, Tensor raw, int kind, Tensor? bias, bool amx, bool batch=False, int activations=0) -> Tensor");
  m.def("kquant_dequantize(Tensor raw, int kind, int k) -> Tensor");
  m.def("kquant_integer_linear(Tensor x, Tensor raw, int kind, int activations, bool tiles) -> Tensor");
  m.def("integer_tiles_available() -> bool", &mooncake_q4::amx_int8_available);
}

TORCH_LIBRARY_IMPL(mooncake_q4, CPU, m) {
  m.impl("kquant_linear", &mooncake_q4::kquant_linear);
  m.impl("kquant_dequantize", &mooncake_q4::kquant_dequantize);
  m.impl("kquant_integer_linear", &mooncake_q4::kquant_integer_linear);
}
