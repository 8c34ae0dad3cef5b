// The kquant_linear, kquant_integer_linear and kquant_dequantize ops: a GGUF's Q4_K, Q5_K, Q6_K and IQ4_XS
// rows as the file stores them (formats in kquant_formats.h and kquant_levels.h; the bf16 kernels in
// block_kernels.h and block_gemm.h, the integer ones for decoding rows in kquant_integer.h; see quantization/gguf/avx512.py).
#include <torch/library.h>

#include "block_gemm.h"
#include "kquant_integer.h"

namespace mooncake_avx512 {
namespace {

// Decoding rows with their activations quantized per super-block (kquant_int8.h, kquant_int16.h,
// kquant_tiles.h).
at::Tensor integer_linear(const uint16_t* xs, const uint8_t* q, int64_t kind, int64_t activations, IntegerPath path,
                          const c10::optional<at::Tensor>& bias, int64_t rows, int64_t k, int64_t n) {
  auto y = at::empty({rows, n}, at::TensorOptions().dtype(at::kFloat));
  IntegerActivations x(xs, rows, k, activations);
  integer_multiply(x, q, kind, path, y.data_ptr<float>(), n);
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
  if (activations != kBf16 && !batch) {
    const IntegerPath path = amx ? IntegerPath::kAuto : IntegerPath::kRegisters;
    return integer_linear(xs, q, kind, activations, path, bias, rows, k, n);
  }
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
}  // namespace mooncake_avx512

TORCH_LIBRARY_IMPL(mooncake_avx512, CPU, m) {
  m.impl("kquant_linear", &mooncake_avx512::kquant_linear);
  m.impl("kquant_dequantize", &mooncake_avx512::kquant_dequantize);
  m.impl("kquant_integer_linear", &mooncake_avx512::kquant_integer_linear);
}
