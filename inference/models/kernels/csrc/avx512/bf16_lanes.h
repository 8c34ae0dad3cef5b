// 16 bf16 values <-> one AVX-512 register of fp32, shared by the native kernels (decode_layers.cpp,
// prompt_attention.cpp).
#pragma once

#include <c10/util/BFloat16.h>
#include <immintrin.h>

namespace mooncake_avx512 {

// 16 bf16 -> 16 fp32 (exact).
inline __m512 load16(const c10::BFloat16* p) {
  const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

// 16 fp32 -> 16 bf16, rounded to nearest even (as c10::BFloat16 rounds).
inline void store16(c10::BFloat16* p, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), (__m256i)_mm512_cvtneps_pbh(v));
}

}  // namespace mooncake_avx512
