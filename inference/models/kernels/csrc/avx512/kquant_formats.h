// ggml's K-quant super-blocks (Q4_K, Q5_K, Q6_K, and IQ4_XS with them) as formats for the generic kernels in block_kernels.h: each row
// is the file's own bytes, super-block after super-block of 256 weights, read as stored.
//
// Per row, each super-block's packed 6-bit (Q4_K, Q5_K) or int8 (Q6_K) sub-block scales are decoded once
// into fp32 (2 floats per 32 weights, in L1); the levels are expanded a 64-weight pair of blocks at a time,
// in the weights' own order, so x needs no permutation. The values are gguf-py's dequantization, bit for
// bit, rounded once to bf16:
//   Q4_K, Q5_K: W = (d * sc) * q - dmin * m, the product exact in fp32 (11 x 6 x 5 significant bits), so
//               one FMA rounds as numpy's subtraction does;
//   Q6_K:       W = (d * sc) * (q - 32), two fp32 products in that order, as gguf-py computes them.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace mooncake_avx512 {

inline float half_at(const uint8_t* p) {
  uint16_t bits;
  __builtin_memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);
}

// The 6-bit (sc, m) pairs of a Q4_K/Q5_K super-block as 16 unsigned bytes, sc 0..7 then m 0..7: ggml's
// get_scale_min_k4 for all eight at once (scalar code made this half the call). For j < 4, sc = s[j] & 63 and
// m = s[j + 4] & 63; for j >= 4, the low 4 bits come from s[j + 4] and the top 2 from the top of s[j - 4]
// (sc) or s[j] (m). The 16-byte load reads 4 bytes of levels past the 12.
inline __m128i k4_scale_bytes(const uint8_t* block) {
  const __m128i six = _mm_set1_epi8(0x3F), low4 = _mm_set1_epi8(0x0F), top2 = _mm_set1_epi8(0x30);
  const __m128i w0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 4));
  const __m128i w1 = _mm_srli_si128(w0, 4), w2 = _mm_srli_si128(w0, 8);
  const __m128i sc_lo = _mm_and_si128(w0, six), m_lo = _mm_and_si128(w1, six);
  const __m128i sc_hi = _mm_or_si128(_mm_and_si128(w2, low4), _mm_and_si128(_mm_srli_epi32(w0, 2), top2));
  const __m128i m_hi =
      _mm_or_si128(_mm_and_si128(_mm_srli_epi32(w2, 4), low4), _mm_and_si128(_mm_srli_epi32(w1, 2), top2));
  return _mm_unpacklo_epi64(_mm_unpacklo_epi32(sc_lo, sc_hi), _mm_unpacklo_epi32(m_lo, m_hi));
}

// (d * sc, -(dmin * m)) per 32 weights of a Q4_K/Q5_K row: super-blocks start with d, dmin, scales[12].
template <int64_t kBytes>
inline void row_scales_k4(const uint8_t* row, float* dst, int64_t k) {
  const __m512i interleave = _mm512_setr_epi32(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  for (int64_t sb = 0; sb < k / 256; ++sb) {
    const uint8_t* block = row + sb * kBytes;
    const __m512 values = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(k4_scale_bytes(block)));  // sc 0..7, m 0..7
    const __m512 factors =
        _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(half_at(block)), _mm512_set1_ps(-half_at(block + 2)));
    // Both products are exact in fp32 (11 x 6 significant bits), so -(dmin * m) = (-dmin) * m.
    _mm512_storeu_ps(dst + sb * 16, _mm512_permutexvar_ps(interleave, _mm512_mul_ps(values, factors)));
  }
}

// A 5-bit sub-block's 32 weights as a bf16 table: entry q is scale * q + offset.
inline __m512i table32(float scale, float offset) {
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512 lo = _mm512_fmadd_ps(_mm512_set1_ps(scale), iota, _mm512_set1_ps(offset));
  const __m512 hi =
      _mm512_fmadd_ps(_mm512_set1_ps(scale), _mm512_add_ps(iota, _mm512_set1_ps(16.0f)), _mm512_set1_ps(offset));
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

// Q4_K: {d, dmin, scales[12], qs[128]}; the 32 bytes of pair j hold sub-block 2j in their low nibbles and
// 2j+1 in their high ones.
struct Q4KFormat {
  static constexpr bool kPermuteX = false;
  static constexpr int64_t kBytes = 144;
  static int64_t row_bytes(int64_t k) { return k / 256 * kBytes; }
  static void row_scales(const uint8_t* row, const uint16_t*, float* dst, int64_t k) {
    row_scales_k4<kBytes>(row, dst, k);
  }
  static void expand(const uint8_t* row, int64_t b, const float* s, __m512i* wa, __m512i* wb) {
    const uint8_t* q = row + (b / 8) * kBytes + 16 + (b % 8) * 16;
    _mm_prefetch(reinterpret_cast<const char*>(q + 2048), _MM_HINT_T0);
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 t0 = _mm512_fmadd_ps(_mm512_set1_ps(s[0]), iota, _mm512_set1_ps(s[1]));
    const __m512 t1 = _mm512_fmadd_ps(_mm512_set1_ps(s[2]), iota, _mm512_set1_ps(s[3]));
    const __m512i table = (__m512i)_mm512_cvtne2ps_pbh(t1, t0);
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m512i lo = _mm512_cvtepu8_epi16(_mm256_and_si256(bytes, nibble));
    const __m512i hi = _mm512_cvtepu8_epi16(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble));
    *wa = _mm512_permutexvar_epi16(lo, table);
    *wb = _mm512_permutexvar_epi16(_mm512_add_epi16(hi, _mm512_set1_epi16(16)), table);
  }
};

// Q5_K: {d, dmin, scales[12], qh[32], qs[128]}; as Q4_K, with bit 2j (2j+1) of qh[l] as the fifth bit of
// sub-block 2j's (2j+1's) weight l.
struct Q5KFormat {
  static constexpr bool kPermuteX = false;
  static constexpr int64_t kBytes = 176;
  static int64_t row_bytes(int64_t k) { return k / 256 * kBytes; }
  static void row_scales(const uint8_t* row, const uint16_t*, float* dst, int64_t k) {
    row_scales_k4<kBytes>(row, dst, k);
  }
  static void expand(const uint8_t* row, int64_t b, const float* s, __m512i* wa, __m512i* wb) {
    const uint8_t* block = row + (b / 8) * kBytes;
    const int pair = static_cast<int>(b % 8) / 2;
    const uint8_t* q = block + 48 + pair * 32;
    _mm_prefetch(reinterpret_cast<const char*>(q + 2048), _MM_HINT_T0);
    const __m512i table_a = table32(s[0], s[1]), table_b = table32(s[2], s[3]);
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 16));
    const __m256i nibble = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i bit_a = _mm256_and_si256(_mm256_srl_epi16(high, _mm_cvtsi32_si128(2 * pair)), one);
    const __m256i bit_b = _mm256_and_si256(_mm256_srl_epi16(high, _mm_cvtsi32_si128(2 * pair + 1)), one);
    const __m256i qa = _mm256_or_si256(_mm256_and_si256(bytes, nibble), _mm256_slli_epi16(bit_a, 4));
    const __m256i qb =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble), _mm256_slli_epi16(bit_b, 4));
    *wa = _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(qa), table_a);
    *wb = _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(qb), table_b);
  }
};

// Q6_K: {ql[128], qh[64], scales[16] int8, d}; each half of 128 weights takes 64 bytes of ql (low nibbles
// for its first 64 weights, high for the rest) and 32 of qh (two bits per weight, 2 * (weight / 32 % 4) up).
struct Q6KFormat {
  static constexpr bool kPermuteX = false;
  static constexpr int64_t kBytes = 210;
  static int64_t row_bytes(int64_t k) { return k / 256 * kBytes; }
  static void row_scales(const uint8_t* row, const uint16_t*, float* dst, int64_t k) {
    for (int64_t sb = 0; sb < k / 256; ++sb) {
      const uint8_t* block = row + sb * kBytes;
      const __m128i scales = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 192));
      const __m512 values = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(scales));
      _mm512_storeu_ps(dst + sb * 16, _mm512_mul_ps(values, _mm512_set1_ps(half_at(block + 208))));
    }
  }
  // 32 levels in -32..31 times one scale per 16, as two fp32 products, rounded to 32 bf16.
  static __m512i scaled(__m256i levels, const float* s) {
    const __m256i centred = _mm256_sub_epi8(levels, _mm256_set1_epi8(32));
    const __m512 lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(centred))),
                                    _mm512_set1_ps(s[0]));
    const __m512 hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(centred, 1))),
                                    _mm512_set1_ps(s[1]));
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
  }
  static void expand(const uint8_t* row, int64_t b, const float* s, __m512i* wa, __m512i* wb) {
    const uint8_t* block = row + (b / 8) * kBytes;
    const int pair = static_cast<int>(b % 8) / 2, half = pair / 2, upper = pair % 2;
    const uint8_t* ql = block + 64 * half;
    const uint8_t* qh = block + 128 + 32 * half;
    _mm_prefetch(reinterpret_cast<const char*>(ql + 2048), _MM_HINT_T0);
    const __m256i nibble = _mm256_set1_epi8(0x0F), two_bits = _mm256_set1_epi8(3);
    const __m128i shift = _mm_cvtsi32_si128(4 * upper);
    const __m256i la = _mm256_and_si256(_mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql)), shift), nibble);
    const __m256i lb =
        _mm256_and_si256(_mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32)), shift), nibble);
    const __m256i h = _mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh)), shift);
    const __m256i ha = _mm256_slli_epi16(_mm256_and_si256(h, two_bits), 4);
    const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 2), two_bits), 4);
    *wa = scaled(_mm256_or_si256(la, ha), s);
    *wb = scaled(_mm256_or_si256(lb, hb), s + 2);
  }
};

// IQ4_XS: {d, scales_h (u16), scales_l[4], qs[128]}; sub-block j's 16 bytes hold its weights 0..15 in the
// low nibbles and 16..31 in the high ones, each an index into ggml's non-linear table kIq4nlValues; its scale
// is ls - 32, ls = 4 bits of scales_l[j / 2] and 2 of scales_h. W = (d * (ls - 32)) * value, two fp32
// products as gguf-py computes them.
alignas(16) inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                        1,    13,   25,  38,  53,  69,  89,  113};

inline int iq4xs_scale(const uint8_t* block, int j) {
  uint16_t high;
  __builtin_memcpy(&high, block + 2, 2);
  return (((block[4 + j / 2] >> (4 * (j % 2))) & 0xF) | (((high >> (2 * j)) & 3) << 4)) - 32;
}

// The 32 indices of sub-blocks j and j + 1 (32 bytes from q) in the weights' order, as two halves of 16:
// *a = [j's low nibbles | j's high nibbles], *b the same for j + 1.
inline void iq4xs_indices(const uint8_t* q, __m256i* a, __m256i* b) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_and_si256(bytes, nibble), hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
  *a = _mm256_permute2x128_si256(lo, hi, 0x20);
  *b = _mm256_permute2x128_si256(lo, hi, 0x31);
}

struct IQ4XSFormat {
  static constexpr bool kPermuteX = false;
  static constexpr int64_t kBytes = 136;
  static int64_t row_bytes(int64_t k) { return k / 256 * kBytes; }
  static void row_scales(const uint8_t* row, const uint16_t*, float* dst, int64_t k) {
    for (int64_t sb = 0; sb < k / 256; ++sb) {
      const uint8_t* block = row + sb * kBytes;
      const float d = half_at(block);
      for (int j = 0; j < 8; ++j) {
        dst[sb * 16 + 2 * j] = d * static_cast<float>(iq4xs_scale(block, j));
        dst[sb * 16 + 2 * j + 1] = 0.0f;
      }
    }
  }
  static void expand(const uint8_t* row, int64_t b, const float* s, __m512i* wa, __m512i* wb) {
    const uint8_t* q = row + (b / 8) * kBytes + 8 + (b % 8) * 16;
    _mm_prefetch(reinterpret_cast<const char*>(q + 2048), _MM_HINT_T0);
    const __m512 values = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(kIq4nlValues))));
    const __m512i table = (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(_mm512_set1_ps(s[2]), values),
                                                       _mm512_mul_ps(_mm512_set1_ps(s[0]), values));
    __m256i a, c;
    iq4xs_indices(q, &a, &c);
    *wa = _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(a), table);
    *wb = _mm512_permutexvar_epi16(_mm512_add_epi16(_mm512_cvtepu8_epi16(c), _mm512_set1_epi16(16)), table);
  }
};

}  // namespace mooncake_avx512
