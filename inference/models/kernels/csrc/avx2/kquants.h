// K-quant super-blocks (Q4_K, Q5_K, Q6_K, IQ4_XS) against activations quantized per 256 values, in integers
// as llama.cpp does on AVX2: per 32 weights one vpmaddubsw (levels x activations, in int16 pairs) and one
// vpmaddwd with the sub-block's scale, summed in int32 over the super-block; floating point enters once per
// super-block and row (its d times the activations' scale), and the Q4_K/Q5_K minimums once more, as the
// dot of the eight 6-bit minimums with the activations' eight 32-value sums. 14-bit activations take that
// path for each int8 half, the high one's sum shifted by 7, or (common.h's Path::kWords) meet the levels
// widened to int16 and times their scale (at most 4096 in magnitude) in two vpmaddwd: every type's sum
// stays below 2^31.
#pragma once

#include "common.h"

namespace mooncake_avx2 {

// A super-block's levels (32 per sub-block, in value order) and each sub-block's integer scale as int16
// lanes; d (and, for Q4_K/Q5_K, -dmin and the minimums as int32 lanes).
struct SuperBlock {
  __m256i levels[8], scales[8], minimums;
  float d, neg_dmin;
};

// Q4_K/Q5_K's eight 6-bit (scale, minimum) pairs, ggml's get_scale_min_k4 for all at once: four 32-bit
// words hold the eight scales' bytes then the eight minimums', widened to int16 and int32 lanes.
inline void k4_scales(const uint8_t* s, SuperBlock& out) {
  uint32_t w[4];
  __builtin_memcpy(w, s, 12);
  const uint32_t low6 = 0x3F3F3F3F, low4 = 0x0F0F0F0F, top2 = 0x03030303;
  w[3] = ((w[2] >> 4) & low4) | (((w[1] >> 6) & top2) << 4);
  const uint32_t minimums = w[1] & low6;
  w[1] = (w[2] & low4) | (((w[0] >> 6) & top2) << 4);
  w[2] = minimums;
  w[0] &= low6;
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w));
  const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(bytes));
  for (int j = 0; j < 8; ++j) out.scales[j] = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(0x0100 + 0x0202 * j));
  out.minimums = _mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8));
}

template <bool kFifthBit>
struct K4Super {  // Q4_K {d, dmin, scales[12], qs[128]}; Q5_K adds qh[32] before qs. W = d*sc*q - dmin*m
  static constexpr int64_t kBytes = kFifthBit ? 176 : 144;
  static constexpr bool kMinimums = true, kSigned = false;
  static void load(const uint8_t* block, SuperBlock& s) {
    s.d = half_at(block);
    s.neg_dmin = -half_at(block + 2);
    k4_scales(block + 4, s);
    const uint8_t* qs = block + (kFifthBit ? 48 : 16);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    const __m256i high = kFifthBit ? load32(block + 16) : _mm256_setzero_si256();
    for (int pair = 0; pair < 4; ++pair) {
      const __m256i bytes = load32(qs + 32 * pair);
      __m256i a = _mm256_and_si256(bytes, low4), b = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      if (kFifthBit) {  // bit j of qh[l] adds 16 to value l of sub-block j
        const __m256i one = _mm256_set1_epi8(1);
        a = _mm256_or_si256(a, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * pair), one), 4));
        b = _mm256_or_si256(b, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * pair + 1), one), 4));
      }
      s.levels[2 * pair] = a;
      s.levels[2 * pair + 1] = b;
    }
  }
};

struct Q6Super {  // {ql[128], qh[64], scales[16] int8, d}: W = d * sc16 * (q - 32), q 0..63
  static constexpr int64_t kBytes = 210;
  static constexpr bool kMinimums = false, kSigned = true;
  static void load(const uint8_t* block, SuperBlock& s) {
    s.d = half_at(block + 208);
    // The 16 int8 scales as int16, each 128-bit lane holding one half's eight: sub-block j's 32 values take
    // scale 2j in their first 16 and 2j + 1 in the rest (one shuffle picks both).
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 192));
    const __m256i scales16[2] = {_mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc)),
                                 _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(sc, 8)))};
    const __m256i low4 = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
    for (int half = 0; half < 2; ++half) {
      const __m256i ql0 = load32(block + 64 * half), ql1 = load32(block + 64 * half + 32);
      const __m256i qh = load32(block + 128 + 32 * half);
      const __m256i lows[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                               _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                               _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4)};
      for (int t = 0; t < 4; ++t) {
        const __m256i top = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * t), three);
        const int j = 4 * half + t;
        s.levels[j] = _mm256_sub_epi8(_mm256_or_si256(lows[t], _mm256_slli_epi16(top, 4)), bias);
        const short first = static_cast<short>(0x0100 + 0x0202 * 2 * t), second = static_cast<short>(first + 0x0202);
        s.scales[j] = _mm256_shuffle_epi8(scales16[half], _mm256_set_m128i(_mm_set1_epi16(second), _mm_set1_epi16(first)));
      }
    }
  }
};

struct IQ4XSSuper {  // {d, scales_h, scales_l[4], qs[128]}: W = d * (ls - 32) * kvalues[q]
  static constexpr int64_t kBytes = 136;
  static constexpr bool kMinimums = false, kSigned = true;
  static void load(const uint8_t* block, SuperBlock& s) {
    s.d = half_at(block);
    uint16_t scales_h;
    __builtin_memcpy(&scales_h, block + 2, 2);
    const __m128i table = _mm_setr_epi8(-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
    const __m256i tables = _mm256_set_m128i(table, table);
    for (int j = 0; j < 8; ++j) {
      const int ls = ((block[4 + j / 2] >> (4 * (j % 2))) & 0x0F) | (((scales_h >> (2 * j)) & 3) << 4);
      s.scales[j] = _mm256_set1_epi16(static_cast<int16_t>(ls - 32));
      s.levels[j] = _mm256_shuffle_epi8(tables, nibbles(block + 8 + 16 * j));
    }
  }
};

template <class F>
inline __m256i pairs(__m256i levels, __m256i x) {
  return F::kSigned ? pairs_signed(levels, x) : pairs_unsigned(levels, x);
}

// One weight row against kRows activation rows starting at r0 (Activations with block 256): out[r]. Each
// sub-block's levels and scales are loaded once for all kRows rows, whose int32 sums stay in registers.
template <class F, Path kPath, int kRows>
inline void super_row(const uint8_t* row, int64_t blocks, const Activations& a, int64_t r0, float* out) {
  __m256 acc[kRows];
  for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
  SuperBlock s;
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_ahead(row + b * F::kBytes, F::kBytes);
    F::load(row + b * F::kBytes, s);
    __m256i high[kRows], low[kRows];
    for (int r = 0; r < kRows; ++r) high[r] = low[r] = _mm256_setzero_si256();
    if constexpr (kPath == Path::kWords) {
      const int16_t* xw[kRows];
      for (int r = 0; r < kRows; ++r) xw[r] = a.words.data() + (r0 + r) * a.k + b * 256;
      for (int j = 0; j < 8; ++j) {
        __m256i halves[2];
        expand_pairs<F::kSigned>(s.levels[j], halves);
        halves[0] = _mm256_mullo_epi16(halves[0], s.scales[j]);
        halves[1] = _mm256_mullo_epi16(halves[1], s.scales[j]);
        for (int r = 0; r < kRows; ++r) high[r] = _mm256_add_epi32(high[r], pair_dot(halves, xw[r] + 32 * j));
      }
    } else {
      const int8_t* xq[kRows];
      const int8_t* xl[kRows];
      for (int r = 0; r < kRows; ++r) {
        xq[r] = a.q.data() + (r0 + r) * a.k + b * 256;
        xl[r] = kPath == Path::kHalves ? a.low.data() + (r0 + r) * a.k + b * 256 : nullptr;
      }
      for (int j = 0; j < 8; ++j) {
        const __m256i levels = s.levels[j], scales = s.scales[j];
        for (int r = 0; r < kRows; ++r) {
          high[r] = _mm256_add_epi32(high[r], _mm256_madd_epi16(pairs<F>(levels, load32(xq[r] + 32 * j)), scales));
          if (kPath == Path::kHalves)
            low[r] = _mm256_add_epi32(low[r], _mm256_madd_epi16(pairs<F>(levels, load32(xl[r] + 32 * j)), scales));
        }
      }
    }
    for (int r = 0; r < kRows; ++r) {
      const __m256i dot =
          kPath == Path::kHalves ? _mm256_add_epi32(_mm256_slli_epi32(high[r], 7), low[r]) : high[r];
      const float dx = a.d[(r0 + r) * a.blocks + b];
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(s.d * dx), acc[r]);
      if (F::kMinimums) {
        const __m256i sums = load32(a.sums.data() + ((r0 + r) * a.k + b * 256) / kGroup);
        const __m256 mins = _mm256_cvtepi32_ps(_mm256_mullo_epi32(s.minimums, sums));
        acc[r] = _mm256_fmadd_ps(mins, _mm256_set1_ps(s.neg_dmin * dx), acc[r]);
      }
    }
  }
  for (int r = 0; r < kRows; ++r) out[r] = hsum(acc[r]);
}

}  // namespace mooncake_avx2
