// Shared by the AVX2 block kernels (avx2_blocks.cpp, avx2_kquants.h): the activations as the kernels take
// them, and small vector helpers. AVX2, FMA and F16C only.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <vector>

namespace mooncake_avx2 {

constexpr int64_t kGroup = 32;

inline float half_at(const uint8_t* p) {
  uint16_t bits;
  __builtin_memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}

inline __m256i load32(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// How far ahead of the weights being multiplied their stream is prefetched. Each thread reads one run of whole
// weight rows in order, so a fixed distance in bytes lands on its next row when this one ends. Without it a
// decoding row read 3.4-4.5 GB/s from DRAM on a 2-vCPU Intel Xeon (its prefetchers alone), as the AVX512
// kernels did before theirs (docs/design/gguf-blocks.md).
constexpr int64_t kPrefetchBytes = 4096;  // 2 and 8 KiB measured no better

// The cache lines of [p + kPrefetchBytes, + bytes): one prefetch per 64 bytes, so a stream of such calls,
// each starting where the last began plus at most 64 bytes, misses no line.
inline void prefetch_ahead(const void* p, int64_t bytes) {
  const char* at = static_cast<const char*>(p) + kPrefetchBytes;
  for (int64_t line = 0; line < bytes; line += 64) _mm_prefetch(at + line, _MM_HINT_T0);
}

// Packs 32 int32 (each within int8) to bytes in order: packs interleave 128-bit lanes, the permute puts them
// back.
inline void store_bytes(int8_t* dst, const __m256i* ints) {
  const __m256i words = _mm256_packs_epi32(ints[0], ints[1]), words2 = _mm256_packs_epi32(ints[2], ints[3]);
  const __m256i bytes =
      _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words, words2), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), bytes);
}

// Pair order, for 14-bit activations held as int16 and the levels widened to meet them: per 32 values the 16
// whose index is 0 or 1 mod 4, then the 16 whose index is 2 or 3 mod 4. vpmaddwd over each half, added, then
// puts values 4j..4j+3 in int32 lane j, as vpmaddubsw then vpmaddwd do for int8.
//
// 32 int32 (each within int16, in value order) stored as int16 in pair order: packing gives int16 pairs in
// the order 0,1 2,3 8,9 10,11 4,5 6,7 12,13 14,15 (and 16 on), which one permute sorts into the two halves.
inline void store_pairs(int16_t* dst, const __m256i* ints) {
  const __m256i order = _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7);
  const __m256i first = _mm256_permutevar8x32_epi32(_mm256_packs_epi32(ints[0], ints[1]), order);
  const __m256i second = _mm256_permutevar8x32_epi32(_mm256_packs_epi32(ints[2], ints[3]), order);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm256_permute2x128_si256(first, second, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + 16), _mm256_permute2x128_si256(first, second, 0x31));
}

// 32 levels (bytes, in value order) as two int16 vectors in pair order; kSigned: the bytes are int8.
template <bool kSigned>
inline void expand_pairs(__m256i levels, __m256i* halves) {
  const __m256i order = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
  const __m256i grouped = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(levels, order), 0xD8);  // qwords 0,2,1,3
  const __m128i first = _mm256_castsi256_si128(grouped), second = _mm256_extracti128_si256(grouped, 1);
  halves[0] = kSigned ? _mm256_cvtepi8_epi16(first) : _mm256_cvtepu8_epi16(first);
  halves[1] = kSigned ? _mm256_cvtepi8_epi16(second) : _mm256_cvtepu8_epi16(second);
}

// The int32 lanes of 32 int16 levels (pair order) times 32 14-bit activations (pair order).
inline __m256i pair_dot(const __m256i* halves, const int16_t* x) {
  return _mm256_add_epi32(
      _mm256_madd_epi16(halves[0], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))),
      _mm256_madd_epi16(halves[1], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + 16))));
}

// How a product meets 14-bit activations: signed levels (Q8_0, Q6_K, IQ4_XS) as int16 words from this many
// rows on, where widening them once serves several rows; else as two int8 halves (unsigned levels meet
// those in one vpmaddubsw each, and a single row does not repay the widening). Both give the same int32
// lanes, so the choice never changes a result.
constexpr int64_t kWordRows = 4;

enum class Path { kInt8, kHalves, kWords };

// Each row's values quantized per `block` (32 for the Q4/Q8_0 blocks, 256 for the K-quants' super-blocks),
// rounded to nearest: to int8 (scale amax / 127, in `q`), or "wide" to 14 bits (amax / 8191) held twice: as
// two int8 halves, high = floor(v / 128) in -64..63 (`q`) and low = v - 128 * high in 0..127 (`low`), and,
// for kWordRows rows or more, as int16 in pair order (`words`). Per block the scale and scale * sum
// of levels (for the Q4 blocks' offsets); per 32 values the sum of levels (for the K-quants' minimums).
struct Activations {
  int64_t rows, k, block, blocks;
  bool wide;
  std::vector<int8_t> q, low;
  std::vector<int16_t> words;
  std::vector<float> d, dsum;
  std::vector<int32_t> sums;

  Activations(const float* x, int64_t rows_, int64_t k_, int64_t block_, bool wide_)
      : rows(rows_), k(k_), block(block_), blocks(k_ / block_), wide(wide_), q(rows_ * k_),
        low(wide_ ? rows_ * k_ : 0), words(wide_ && rows_ >= kWordRows ? rows_ * k_ : 0), d(rows_ * blocks),
        dsum(rows_ * blocks), sums(rows_ * k_ / kGroup) {
    const float top = wide ? 8191.0f : 127.0f;
    const int64_t per_block = block / kGroup;
#pragma omp parallel for schedule(static) if (rows * k >= 65536)
    for (int64_t b = 0; b < rows * blocks; ++b) {
      const float* v = x + b * block;  // rows are contiguous, so block b of the whole input is row-major
      __m256 amax = _mm256_setzero_ps();
      for (int64_t i = 0; i < block; i += 8) {
        amax = _mm256_max_ps(amax, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_loadu_ps(v + i)));
      }
      const float m = hmax(amax);
      const float scale = m / top;
      const __m256 inverse = _mm256_set1_ps(scale != 0.0f ? top / m : 0.0f);
      int64_t total = 0;
      for (int64_t g = 0; g < per_block; ++g) {
        const int64_t at = b * block + g * kGroup;
        __m256i ints[4];
        for (int i = 0; i < 4; ++i) ints[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + at + 8 * i), inverse));
        const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(ints[0], ints[1]), _mm256_add_epi32(ints[2], ints[3]));
        const int32_t group_sum = static_cast<int32_t>(hsum(_mm256_cvtepi32_ps(sum)));  // exact: |sum| < 2^24
        sums[at / kGroup] = group_sum;
        total += group_sum;
        if (wide) {
          __m256i high[4], rest[4];
          for (int i = 0; i < 4; ++i) {
            high[i] = _mm256_srai_epi32(ints[i], 7);
            rest[i] = _mm256_sub_epi32(ints[i], _mm256_slli_epi32(high[i], 7));
          }
          store_bytes(low.data() + at, rest);
          store_bytes(q.data() + at, high);
          if (!words.empty()) store_pairs(words.data() + at, ints);
        } else {
          store_bytes(q.data() + at, ints);
        }
      }
      d[b] = scale;
      dsum[b] = scale * static_cast<float>(total);
    }
  }

  // The path a product with levels of this signedness takes.
  Path path(bool signed_levels) const {
    return !wide ? Path::kInt8 : signed_levels && !words.empty() ? Path::kWords : Path::kHalves;
  }

  float value(int64_t i) const {
    const int level = wide ? 128 * q[i] + low[i] : q[i];
    return static_cast<float>(level) * d[i / block];
  }
};

// Sum of products of 32 unsigned levels (0..127) with 32 signed activations, as 16 int16 pairs.
inline __m256i pairs_unsigned(__m256i levels, __m256i x) { return _mm256_maddubs_epi16(levels, x); }

// The same for signed levels (-128..127): their magnitudes meet the activations with the levels' signs.
inline __m256i pairs_signed(__m256i levels, __m256i x) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(levels, levels), _mm256_sign_epi8(x, levels));
}

// 16 bytes whose low nibbles are values 0-15 and high nibbles 16-31, as 32 bytes in value order.
inline __m256i nibbles(const uint8_t* p) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i low4 = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(b, 4), low4), _mm_and_si128(b, low4));
}

}  // namespace mooncake_avx2
