// One (row, query head) of attention over the paged KV cache, in fp32: the computation paged_attention.cpp
// runs for every row of a step, and decode_layers.cpp for its decoding rows, so both give a row one set of
// bits (see paged_attention.cpp for why it is fixed this way). Callers set FTZ/DAZ around it, as
// paged_attention's attend_all does.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "common.h"

namespace mooncake_avx2 {

constexpr int64_t kMaxVectors = 32;  // head_dim / 8 up to 256

// Eight cache values as fp32, whatever the cache holds (fp32, or bf16/fp16 as kv_cache_dtype may ask).
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const c10::BFloat16* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}
inline __m256 load8(const c10::Half* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// e^x for x <= 0 (about 1 ulp): x = n ln2 + r, |r| <= ln2/2, a degree-7 polynomial in r, scaled by 2^n. Below
// -87 (where 2^n would leave the normal floats) exactly 0, so a vector's padding lanes (-inf) add nothing.
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 kept = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ);
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i scale = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_and_ps(kept, _mm256_mul_ps(p, _mm256_castsi256_ps(scale)));
}

struct Layout {
  int64_t heads, kv_heads, head_dim, block_size, table_width;
  float scale;
  int64_t window;
  float softcap;
};

// One (row, query head): keys first..length-1 of the row's table. scores: scratch of at least length + 8.
template <class T>
inline void attend_row(const float* q, const T* k_cache, const T* v_cache, const int32_t* table, int64_t first,
                int64_t length, int64_t kvh, const Layout& s, float* scores, float* out) {
  const int64_t vectors = s.head_dim / 8, kv_stride = s.kv_heads * s.head_dim;
  const auto at = [&](const T* cache, int64_t key) {
    return cache + (int64_t{table[key / s.block_size]} * s.block_size + key % s.block_size) * kv_stride +
           kvh * s.head_dim;
  };
  __m256 qv[kMaxVectors];
  for (int64_t i = 0; i < vectors; ++i) qv[i] = _mm256_loadu_ps(q + 8 * i);
  // Four keys' chains at once (each key's own chain and sum unchanged): one chain alone waits on its FMAs.
  const auto score_keys = [&](int64_t key, auto count) {
    constexpr int kKeys = decltype(count)::value;
    const T* k[kKeys];
    __m256 acc[kKeys];
    for (int j = 0; j < kKeys; ++j) {
      k[j] = at(k_cache, key + j);
      acc[j] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < vectors; ++i)
      for (int j = 0; j < kKeys; ++j) acc[j] = _mm256_fmadd_ps(qv[i], load8(k[j] + 8 * i), acc[j]);
    for (int j = 0; j < kKeys; ++j) scores[key + j - first] = hsum(acc[j]) * s.scale;
  };
  int64_t key = first;
  for (; key + 4 <= length; key += 4) score_keys(key, std::integral_constant<int, 4>{});
  for (; key < length; ++key) score_keys(key, std::integral_constant<int, 1>{});
  float top = -INFINITY;
  for (int64_t j = 0; j < length - first; ++j) {
    if (s.softcap > 0.0f) scores[j] = s.softcap * std::tanh(scores[j] / s.softcap);
    top = std::max(top, scores[j]);
  }
  const int64_t count = length - first;
  for (int64_t j = count; j < count + 8; ++j) scores[j] = -INFINITY;  // whole vectors: the pad adds exact zeros
  __m256 sum = _mm256_setzero_ps();
  const __m256 shift = _mm256_set1_ps(top);
  for (int64_t j = 0; j < count; j += 8) {
    const __m256 p = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(scores + j), shift));
    _mm256_storeu_ps(scores + j, p);
    sum = _mm256_add_ps(sum, p);
  }
  __m256 acc[kMaxVectors];
  for (int64_t i = 0; i < vectors; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t key = first; key < length; ++key) {
    const T* v = at(v_cache, key);
    const __m256 p = _mm256_set1_ps(scores[key - first]);
    for (int64_t i = 0; i < vectors; ++i) acc[i] = _mm256_fmadd_ps(p, load8(v + 8 * i), acc[i]);
  }
  const __m256 inverse = _mm256_set1_ps(1.0f / hsum(sum));
  for (int64_t i = 0; i < vectors; ++i) _mm256_storeu_ps(out + 8 * i, _mm256_mul_ps(acc[i], inverse));
}

}  // namespace mooncake_avx2
