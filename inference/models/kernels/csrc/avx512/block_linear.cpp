// The block_linear op: y = x @ W^T for bf16 activations, W held as a GGUF's Q4_0/Q4_1 (or Q8_0) blocks: 1-16
// decoding rows (block_kernels.h), or with batch set any number of rows (block_gemm.h) (quantization/gguf/avx512.py; built by
// kernels/build.py).
#include <torch/library.h>

#include "block_gemm.h"

namespace mooncake_avx512 {
namespace {

// levels: uint8 [n, k / 2] of Q4 nibbles, or int8 [n, k] of Q8_0 levels; dm: (d, m) per block, m = 0 for Q8_0.
at::Tensor block_linear(const at::Tensor& x, const at::Tensor& levels, const at::Tensor& dm,
                     const c10::optional<at::Tensor>& bias, bool amx, bool batch) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kBFloat16, "x must be 2-D bf16");
  const bool q8 = levels.scalar_type() == at::kChar;
  TORCH_CHECK((q8 || levels.scalar_type() == at::kByte) && levels.is_contiguous(),
              "levels must be contiguous uint8 (Q4) or int8 (Q8_0)");
  TORCH_CHECK(dm.scalar_type() == kDmType && dm.is_contiguous(), "dm must be contiguous float16");
  const int64_t rows = x.size(0), k = x.size(1), n = levels.size(0);
  TORCH_CHECK(rows >= 1 && (batch || rows <= max_rows(amx)), "1 to ", max_rows(amx), " rows, got ", rows);
  TORCH_CHECK(k % 64 == 0 && k / 16 <= kMaxDm && levels.size(1) * (q8 ? 1 : 2) == k,
              "input size must be a multiple of 64 matching levels");
  TORCH_CHECK(dm.numel() == n * (k / 32) * 2, "dm must hold (d, m) per block");
  auto xp = x.contiguous().view({rows, k / 64, 2, 2, 16}).permute({0, 1, 3, 2, 4}).contiguous();
  const auto* q = reinterpret_cast<const uint8_t*>(levels.data_ptr());
  const auto* s = reinterpret_cast<const uint16_t*>(dm.data_ptr());
  const auto* xs = reinterpret_cast<const uint16_t*>(xp.data_ptr());
  if (q8) return linear_rows<Q8Format>(x, xs, q, s, bias, n, amx, batch);
  return linear_rows<Q4Format>(x, xs, q, s, bias, n, amx, batch);
}

}  // namespace
}  // namespace mooncake_avx512

TORCH_LIBRARY_IMPL(mooncake_avx512, CPU, m) { m.impl("block_linear", &mooncake_avx512::block_linear); }
