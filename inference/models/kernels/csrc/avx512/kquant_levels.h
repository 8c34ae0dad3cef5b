// A K-quant super-block (Q4_K, Q5_K, Q6_K) read in integers, for the kernels that multiply its levels with
// quantized activations (kquant_int8.h, kquant_int16.h): the sub-block scales as int16 lanes and the fp32
// factors, decoded once per super-block, and each 64-weight pair's levels as 64 unsigned bytes in the
// weights' own order. Q6_K's levels stay unsigned (0..63); its -32 is the kernels' business.
#pragma once

#include <immintrin.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kquant_formats.h"

namespace mooncake_avx512 {

// How far ahead each weight row's stream is prefetched: 32 super-blocks (4.5-6.6 KiB). On a 1B model's
// matrices (0.6 GB, past every cache) one decoding row read 17.4 GB/s with it against 11.8 at 8.
constexpr int64_t kPrefetchSuperBlocks = 32;

// The super-block this thread reads about a row's work from now: kPrefetchSuperBlocks further along the row
// where rows are that long, else the same super-block of the next group's row (`group` rows down). A plain
// 32 ahead from a row of 16 super-blocks (4096 inputs) lands in the group's own rows, read already.
template <class Fmt>
inline void prefetch_lines(const uint8_t* block) {
  const char* start = reinterpret_cast<const char*>(block);
  for (int64_t line = 0; line < Fmt::kBytes + 64; line += 64) _mm_prefetch(start + line, _MM_HINT_T0);
}

template <class Fmt>
inline void prefetch_super_block(const uint8_t* block, int64_t sbs, int64_t group) {
  const int64_t ahead = sbs >= kPrefetchSuperBlocks ? kPrefetchSuperBlocks : group * sbs;
  prefetch_lines<Fmt>(block + ahead * Fmt::kBytes);
}

struct SuperBlock {
  __m512i scales;  // Q4_K/Q5_K: sc 0..7 then m 0..7; Q6_K: the 16 scales
  float d, dmin;
};

inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

struct Q4KLevels {
  static constexpr int64_t kBytes = Q4KFormat::kBytes;
  static constexpr int kWeightsPerScale = 32;
  static constexpr bool kMins = true;
  static constexpr int kCentre = 0;
  static constexpr bool kSigned = false;
  static SuperBlock decode(const uint8_t* block) {
    return {_mm512_castsi256_si512(_mm256_cvtepu8_epi16(k4_scale_bytes(block))), half_at(block),
            half_at(block + 2)};
  }
  // Pair p's 64 levels in the weights' order: sub-block 2p in the low nibbles, 2p + 1 in the high ones.
  // The 32 bytes in both halves, the high half shifted down by 4: two instructions past the load.
  static __m512i levels(const uint8_t* block, int p) {
    const __m512i bytes =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 16 + p * 32)));
    const __m512i shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    return _mm512_and_si512(_mm512_srlv_epi16(bytes, shifts), _mm512_set1_epi8(0x0F));
  }
};

struct Q5KLevels {
  static constexpr int64_t kBytes = Q5KFormat::kBytes;
  static constexpr int kWeightsPerScale = 32;
  static constexpr bool kMins = true;
  static constexpr int kCentre = 0;
  static constexpr bool kSigned = false;
  static SuperBlock decode(const uint8_t* block) { return Q4KLevels::decode(block); }
  // As Q4_K, bit 2p (2p + 1) of qh[l] the fifth bit of sub-block 2p's (2p + 1's) weight l.
  static __m512i levels(const uint8_t* block, int p) {
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 48 + p * 32));
    const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 16));
    const __m256i nibble = _mm256_set1_epi8(0x0F), sixteen = _mm256_set1_epi8(0x10);
    // Bit 2p of each byte moved to bit 4 (shift by 4 - 2p, left or right), then bit 2p + 1 likewise.
    const __m256i bit_a = _mm256_and_si256(p <= 2 ? _mm256_sll_epi16(high, _mm_cvtsi32_si128(4 - 2 * p))
                                                  : _mm256_srl_epi16(high, _mm_cvtsi32_si128(2 * p - 4)),
                                           sixteen);
    const __m256i bit_b = _mm256_and_si256(p <= 1 ? _mm256_sll_epi16(high, _mm_cvtsi32_si128(3 - 2 * p))
                                                  : _mm256_srl_epi16(high, _mm_cvtsi32_si128(2 * p - 3)),
                                           sixteen);
    return join(_mm256_or_si256(_mm256_and_si256(bytes, nibble), bit_a),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble), bit_b));
  }
};

// Q6_K's levels are taken unsigned (0..63): the kernels take the centre (32) back.
struct Q6KLevels {
  static constexpr int64_t kBytes = Q6KFormat::kBytes;
  static constexpr int kWeightsPerScale = 16;
  static constexpr bool kMins = false;
  static constexpr int kCentre = 32;
  static constexpr bool kSigned = false;
  static SuperBlock decode(const uint8_t* block) {
    const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 192));
    return {_mm512_castsi256_si512(_mm256_cvtepi8_epi16(scales)), half_at(block + 208), 0.0f};
  }
  // Pair p: ql's 64 bytes (the low 4 bits, shifted down by 4 for odd p) and qh's 32 bytes in both halves,
  // whose bits 0-1 (low half) and 2-3 (high half), or 4-5 and 6-7 for odd p, become bits 4-5.
  static __m512i levels(const uint8_t* block, int p) {
    const int half = p / 2, upper = p % 2;
    const __m128i shift = _mm_cvtsi32_si128(4 * upper);
    const __m512i low = _mm512_and_si512(_mm512_srl_epi16(_mm512_loadu_si512(block + 64 * half), shift),
                                         _mm512_set1_epi8(0x0F));
    const __m512i qh =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 128 + 32 * half)));
    const __m512i up = _mm512_sllv_epi16(_mm512_srl_epi16(qh, shift),
                                         _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1));
    return _mm512_or_si512(low, _mm512_and_si512(up, _mm512_set1_epi8(0x30)));
  }
};

// IQ4_XS's levels are the table's signed values (-127..113), its scales ls - 32 (signed).
struct IQ4XSLevels {
  static constexpr int64_t kBytes = IQ4XSFormat::kBytes;
  static constexpr int kWeightsPerScale = 32;
  static constexpr bool kMins = false;
  static constexpr int kCentre = 0;
  static constexpr bool kSigned = true;
  static SuperBlock decode(const uint8_t* block) {
    alignas(32) int16_t scales[16] = {};
    for (int j = 0; j < 8; ++j) scales[j] = static_cast<int16_t>(iq4xs_scale(block, j));
    return {_mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(scales))), half_at(block),
            0.0f};
  }
  static __m512i levels(const uint8_t* block, int p) {
    __m256i a, b;
    iq4xs_indices(block + 8 + p * 32, &a, &b);
    const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    return _mm512_shuffle_epi8(table, join(a, b));
  }
};

// What every integer path (registers, tiles; int8 or int16 activations) adds to one output per super-block,
// in one order, so that a row's bits never depend on which path or batch computed it: T, the exact integer
// sum of sc * level * x over the super-block (Q6_K's levels centred), converted once, then for Q4_K/Q5_K the
// exact sum of m * (x's sum per sub-block). Explicit FMAs, as the tile path's vector form (kquant_tiles.h).
template <class Fmt>
inline float add_super_block(float y, int64_t total, int32_t mins, float dx, const SuperBlock& block) {
  y = std::fma(static_cast<float>(total), dx * block.d, y);
  if constexpr (Fmt::kMins) y = std::fma(-static_cast<float>(mins), dx * block.dmin, y);
  return y;
}

// The exact sum of 16 int32 lanes, each below 2^30 in magnitude (two of them still fit int32).
inline int64_t exact_sum(__m512i lanes) {
  const __m256i folded = _mm256_add_epi32(_mm512_castsi512_si256(lanes), _mm512_extracti64x4_epi64(lanes, 1));
  return _mm512_reduce_add_epi64(_mm512_cvtepi32_epi64(folded));
}

// Q4_K/Q5_K: sum over the 8 sub-blocks of m_j * (x's sum over sub-block j), exactly (below 8 * 63 * 2^18).
inline int32_t mins_sum(const SuperBlock& block, const int32_t* x32) {
  const __m256i m32 = _mm256_cvtepu16_epi32(_mm512_extracti32x4_epi32(block.scales, 1));
  const __m256i products = _mm256_mullo_epi32(m32, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x32)));
  return _mm512_reduce_add_epi32(_mm512_zextsi256_si512(products));
}

template <class Fmt>
struct PairIndex {
  __m512i p[4];
  PairIndex() {
    for (int pair = 0; pair < 4; ++pair) {
      alignas(64) int16_t idx[32];
      // int16 lane t belongs to int32 lane t / 2, which sums weights 4 (t / 2) .. + 3 of the pair's 64.
      for (int t = 0; t < 32; ++t) idx[t] = static_cast<int16_t>((pair * 64 + (t / 2) * 4) / Fmt::kWeightsPerScale);
      p[pair] = _mm512_load_si512(idx);
    }
  }
};

// The grouping both integer kernels share: activation rows in groups of 8, 4 and the rest, and for each
// group the weight rows R at a time (4 for one or two activation rows, 2 for three or four, 1 for eight;
// the last few alone) across the threads. call(M, R, m0, row) runs one block of the kernel, M and R as
// std::integral_constant. A (weight row, activation row) pair's instructions do not depend on either.
template <int M, int R, class Call>
void over_weight_rows(int64_t m0, int64_t n, Call& call) {
  at::parallel_for(0, (n + R - 1) / R, 64 / R, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const int64_t row = g * R;
      if (row + R <= n) {
        call(std::integral_constant<int, M>{}, std::integral_constant<int, R>{}, m0, row);
      } else {
        for (int64_t r = row; r < n; ++r)
          call(std::integral_constant<int, M>{}, std::integral_constant<int, 1>{}, m0, r);
      }
    }
  });
}

template <class Call>
void integer_groups(int64_t rows, int64_t n, Call&& call) {
  for (int64_t done = 0; done < rows;) {
    const int64_t left = rows - done;
    const int64_t group = left >= 8 ? 8 : (left > 4 ? 4 : left);
    switch (group) {
      case 1: over_weight_rows<1, 4>(done, n, call); break;
      case 2: over_weight_rows<2, 4>(done, n, call); break;
      case 3: over_weight_rows<3, 2>(done, n, call); break;
      case 4: over_weight_rows<4, 2>(done, n, call); break;
      default: over_weight_rows<8, 1>(done, n, call); break;
    }
    done += group;
  }
}

}  // namespace mooncake_avx512
