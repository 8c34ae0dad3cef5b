// One matrix's product with activations quantized as the AVX2 ops quantize them (common.h's Activations):
// what block_linear and kquant_linear compute after quantizing their input, and what decode_layers.cpp calls
// for each part of each projection, so a fused row gets the module path's bits.
#pragma once

#include <ATen/ATen.h>

#include "common.h"

namespace mooncake_avx2 {

// y[rows, out] for (levels, dm) blocks: uint8 nibbles [out, in / 2] (Q4_0/Q4_1) or int8 levels [out, in]
// (Q8_0); `a` quantized per 32 values.
void dm_product(const Activations& a, const at::Tensor& levels, const at::Tensor& dm, float* y);

// Bytes per super-block of K-quant type `kind` (ggml's id: Q4_K, Q5_K, Q6_K, IQ4_XS), 0 for any other.
int64_t kquant_bytes(int64_t kind);

// y[rows, out] for K-quant super-blocks raw [out, in / 256 * bytes]; `a` quantized per 256 values.
void kquant_product(const Activations& a, const at::Tensor& raw, int64_t kind, float* y);

}  // namespace mooncake_avx2
