// Several decoding rows against K-quant super-blocks on AMX-INT8 tiles, with the register paths' numerics
// (kquant_int8.h, kquant_int16.h) to the bit: the same quantized activations, the same exact integer sum per
// super-block, the same floating-point steps after it (add_super_block, here in 16 lanes at once). Integer
// sums are exact in any order, so a row gets the same bits on either path, alone or in any batch, and a
// server may switch paths by row count without changing an answer.
//
// Weights are the A operand, 16 rows at a time, in their own order. Each weight's integer product with its
// sub-block's scale, w = sc * (level - centre) (|w| <= 4096), is split into a low (unsigned) and a high
// (signed) byte, so the scales ride in the tile product and each C tile sums a whole super-block:
// T = 256 * (high part) + (low part). Q4_K splits the scale instead, sc = 16 * (sc >> 4) + (sc & 15): each
// part times a level fits a byte, one vpmullw per plane, and T = 16 * high + low. The activations are B,
// laid out once per input (kquant_tile_activations.h); int16 ones (a = 128 * hi + lo) take two int8 tiles.
// A super-block thus costs 4 tile products per 64 weights with int16 activations (2 with int8), and AVX-512
// only expands the weights and applies the fp32 factors; every partial sum stays inside int32, and T is
// joined in int64 (Q4_K's, below 2^31, in int32).
#pragma once

#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "amx_tiles.h"
#include "kquant_int16.h"
#include "kquant_int8.h"
#include "kquant_tile_activations.h"

namespace mooncake_avx512 {

// Every AMX CPU has AVX512-VBMI (byte permutes); the library as a whole must not assume it (Cooper Lake).
#define MOONCAKE_TILE_CODE __attribute__((target("avx512vbmi")))

// From this many decoding rows the tiles are faster than registers (docs/design/gguf-blocks.md).
constexpr int64_t kIntegerTileRows = 5;

// Whether the CPU has AMX-INT8 (CPUID leaf 7, EDX bit 25) and the process may use tiles. Asked once: under
// a hypervisor every CPUID is a trip out of the guest.
inline bool amx_int8_available() {
  static const bool available = [] {
    unsigned eax, ebx, ecx, edx;
    __asm__("cpuid" : "=a"(eax), "=b"(ebx), "=c"(ecx), "=d"(edx) : "a"(7), "c"(0));
    return ((edx >> 25) & 1) != 0 && amx_available();
  }();
  return available;
}

// Bytes 0, 2, 4, ... (low) or 1, 3, 5, ... (high) of two vectors of 32 int16 lanes, as 64 bytes.
MOONCAKE_TILE_CODE inline __m512i byte_halves(__m512i a, __m512i b, bool high) {
  alignas(64) static const struct Index {
    uint8_t low[64], high[64];
    Index() {
      for (int i = 0; i < 64; ++i) low[i] = static_cast<uint8_t>(2 * i), high[i] = static_cast<uint8_t>(2 * i + 1);
    }
  } index;
  return _mm512_permutex2var_epi8(a, _mm512_load_si512(high ? index.high : index.low), b);
}

// Which scale each of a 64-weight pair's bytes takes: the index of its sub-block's scale, per pair.
template <class Fmt>
struct ScaleBytes {
  __m512i index[4];
  __m512i words[4];  // the same per int16 lane (the lane's two bytes share a sub-block)
  ScaleBytes() {
    for (int p = 0; p < 4; ++p) {
      alignas(64) uint8_t idx[64];
      alignas(64) int16_t word_idx[32];
      for (int b = 0; b < 64; ++b) idx[b] = static_cast<uint8_t>((p * 64 + b) / Fmt::kWeightsPerScale);
      for (int w = 0; w < 32; ++w) word_idx[w] = static_cast<int16_t>((p * 64 + 2 * w) / Fmt::kWeightsPerScale);
      index[p] = _mm512_load_si512(idx);
      words[p] = _mm512_load_si512(word_idx);
    }
  }
};

constexpr __mmask64 kOddBytes = 0xAAAAAAAAAAAAAAAAull;

// Unsigned levels (Q4_K, Q5_K, Q6_K): vpmaddubsw with the scale on every other byte gives the products of
// the even and the odd weights as int16 lanes, whose low and high bytes interleave back into weight order.
template <class Fmt>
MOONCAKE_TILE_CODE inline void unsigned_products(const uint8_t* block, const SuperBlock& decoded,
                                                 const ScaleBytes<Fmt>& bytes, uint8_t* low, int8_t* high) {
  if constexpr (std::is_same_v<Fmt, Q4KLevels>) {
    // Q4_K: sc = 16 * (sc >> 4) + (sc & 15), each part times a level (<= 15) fits a byte, so vpmullw on a
    // lane's two levels gives both weights' products in weight order, no carry between them: w = 16 * high
    // + low, high <= 45 and low <= 225.
    const __m512i low_scales = _mm512_and_si512(decoded.scales, _mm512_set1_epi16(15));
    const __m512i high_scales = _mm512_srli_epi16(decoded.scales, 4);
    for (int p = 0; p < 4; ++p) {
      const __m512i levels = Fmt::levels(block, p);
      const __m512i which = bytes.words[p];
      _mm512_store_si512(low + p * 64, _mm512_mullo_epi16(levels, _mm512_permutexvar_epi16(which, low_scales)));
      _mm512_store_si512(high + p * 64, _mm512_mullo_epi16(levels, _mm512_permutexvar_epi16(which, high_scales)));
    }
    return;
  }
  const __m256i scales8 = _mm512_cvtepi16_epi8(decoded.scales);  // every type's scales fit int8
  const __m512i scales = _mm512_castsi256_si512(scales8);
  for (int p = 0; p < 4; ++p) {
    const __m512i levels = Fmt::levels(block, p);
    const __m512i per_byte = _mm512_permutexvar_epi8(bytes.index[p], scales);
    const __m512i even_scale = _mm512_maskz_mov_epi8(~kOddBytes, per_byte);
    const __m512i odd_scale = _mm512_maskz_mov_epi8(kOddBytes, per_byte);
    __m512i even = _mm512_maddubs_epi16(levels, even_scale), odd = _mm512_maddubs_epi16(levels, odd_scale);
    if constexpr (Fmt::kCentre != 0) {  // sc * (q - 32): both weights of a lane share a sub-block
      const __m512i centre = _mm512_maddubs_epi16(_mm512_set1_epi8(Fmt::kCentre), even_scale);
      even = _mm512_sub_epi16(even, centre);
      odd = _mm512_sub_epi16(odd, centre);
    }
    _mm512_store_si512(low + p * 64, _mm512_mask_blend_epi8(kOddBytes, even, _mm512_slli_epi16(odd, 8)));
    _mm512_store_si512(high + p * 64, _mm512_mask_blend_epi8(kOddBytes, _mm512_srli_epi16(even, 8), odd));
  }
}

// Signed levels (IQ4_XS): widened to int16 and multiplied by the scale, then split into bytes.
template <class Fmt>
MOONCAKE_TILE_CODE inline void signed_products(const uint8_t* block, const SuperBlock& decoded,
                                               const WideIndex<Fmt>& index, uint8_t* low, int8_t* high) {
  for (int p = 0; p < 4; ++p) {
    const __m512i levels = Fmt::levels(block, p);
    const __m512i lo = _mm512_cvtepi8_epi16(_mm512_castsi512_si256(levels));
    const __m512i hi = _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(levels, 1));
    const __m512i w0 = _mm512_mullo_epi16(lo, _mm512_permutexvar_epi16(index.lo[p], decoded.scales));
    const __m512i w1 = _mm512_mullo_epi16(hi, _mm512_permutexvar_epi16(index.hi[p], decoded.scales));
    _mm512_store_si512(low + p * 64, byte_halves(w0, w1, false));
    _mm512_store_si512(high + p * 64, byte_halves(w0, w1, true));
  }
}

// One super-block of a group's 16 weight rows, ready for the tiles: each weight's integer product
// w = sc * (level - centre) (|w| <= 4096) as 256 * high + low bytes (Q4_K: 16 * high + low), and the rows'
// decoded factors.
struct Stage {
  alignas(64) uint8_t low[16][256];
  alignas(64) int8_t high[16][256];
  alignas(64) int16_t scales[16][32];  // Q4_K/Q5_K: the minimums m_j at 8 + j
  SuperBlock blocks[16];
};

template <class Fmt>
MOONCAKE_TILE_CODE void expand_stage(const uint8_t* raw, const WideIndex<Fmt>& index, const ScaleBytes<Fmt>& bytes,
                                     int64_t first, int64_t live, int64_t sbs, int64_t sb, Stage* stage) {
  for (int r = 0; r < live; ++r) {
    const uint8_t* block = raw + ((first + r) * sbs + sb) * Fmt::kBytes;
    // The same super-block of the next group (the rows after these 16, the next this thread takes): at 16
    // rows a group's sums outlast its reads, so the stream runs a whole group ahead.
    prefetch_lines<Fmt>(block + 16 * sbs * Fmt::kBytes);
    stage->blocks[r] = Fmt::decode(block);
    if constexpr (Fmt::kMins) _mm512_store_si512(stage->scales[r], stage->blocks[r].scales);
    if constexpr (Fmt::kSigned) {
      signed_products<Fmt>(block, stage->blocks[r], index, stage->low[r], stage->high[r]);
    } else {
      unsigned_products<Fmt>(block, stage->blocks[r], bytes, stage->low[r], stage->high[r]);
    }
  }
}

// The stage's tile products over its super-block into c: low x hi, low x lo, high x hi, high x lo.
template <bool kWide>
inline void multiply_stage(const Stage& stage, const TileActivations& x, int64_t sb, int32_t (*c)[16][16]) {
  _tile_zero(4);
  _tile_zero(6);
  if constexpr (kWide) {
    _tile_zero(5);
    _tile_zero(7);
  }
  for (int chunk = 0; chunk < 4; ++chunk) {
    const int64_t word = (sb * 256 + chunk * 64) / 4 * 16;
    _tile_loadd(0, stage.low[0] + chunk * 64, 256);
    _tile_loadd(1, stage.high[0] + chunk * 64, 256);
    _tile_loadd(2, x.hi.data() + word, 64);
    _tile_dpbusd(4, 0, 2);
    _tile_dpbssd(6, 1, 2);
    if constexpr (kWide) {
      _tile_loadd(3, x.lo.data() + word, 64);
      _tile_dpbusd(5, 0, 3);
      _tile_dpbssd(7, 1, 3);
    }
  }
  _tile_stored(4, c[0], 64);
  _tile_stored(6, c[2], 64);
  if constexpr (kWide) {
    _tile_stored(5, c[1], 64);
    _tile_stored(7, c[3], 64);
  }
}

// add_super_block for 16 weight rows x 16 activation rows (lanes), from the stage's exact integer sums.
template <class Fmt, bool kWide>
MOONCAKE_TILE_CODE void finish_stage(const Stage& stage, const TileActivations& x, int64_t sb, int64_t live,
                                     const int32_t (*c)[16][16], __m512* out) {
  const __m512 dx = _mm512_loadu_ps(x.dx.data() + sb * 16);
  for (int r = 0; r < live; ++r) {
    // T = 256 * high part + low part (Q4_K: 16 * high + low); with int16 activations each part is
    // 128 * (x hi) + (x lo).
    __m512i hi_part = _mm512_load_si512(c[2][r]), lo_part = _mm512_load_si512(c[0][r]);
    if constexpr (kWide) {
      hi_part = _mm512_add_epi32(_mm512_slli_epi32(hi_part, 7), _mm512_load_si512(c[3][r]));
      lo_part = _mm512_add_epi32(_mm512_slli_epi32(lo_part, 7), _mm512_load_si512(c[1][r]));
    }
    __m512 total;
    if constexpr (std::is_same_v<Fmt, Q4KLevels>) {  // T = 16 * high + low; |T| <= 256 * 945 * 8191 < 2^31
      total = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_slli_epi32(hi_part, 4), lo_part));
    } else {
      const __m512i t0 =
          _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(hi_part)), 8),
                           _mm512_cvtepi32_epi64(_mm512_castsi512_si256(lo_part)));
      const __m512i t1 =
          _mm512_add_epi64(_mm512_slli_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(hi_part, 1)), 8),
                           _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(lo_part, 1)));
      total = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtepi64_ps(t0)), _mm512_cvtepi64_ps(t1), 1);
    }
    out[r] = _mm512_fmadd_ps(total, _mm512_mul_ps(dx, _mm512_set1_ps(stage.blocks[r].d)), out[r]);
    if constexpr (Fmt::kMins) {  // sum of m_j * (x's sum over j), two sub-blocks per multiply-add
      const auto* pairs = reinterpret_cast<const uint32_t*>(stage.scales[r] + 8);
      __m512i sum = _mm512_setzero_si512();
      for (int i = 0; i < 4; ++i)
        sum = _mm512_dpwssd_epi32(sum, _mm512_set1_epi32(static_cast<int>(pairs[i])),
                                  _mm512_loadu_si512(x.sums_hi.data() + (sb * 4 + i) * 16));
      if constexpr (kWide) {
        __m512i low_sum = _mm512_setzero_si512();
        for (int i = 0; i < 4; ++i)
          low_sum = _mm512_dpwssd_epi32(low_sum, _mm512_set1_epi32(static_cast<int>(pairs[i])),
                                        _mm512_loadu_si512(x.sums_lo.data() + (sb * 4 + i) * 16));
        sum = _mm512_add_epi32(_mm512_slli_epi32(sum, 7), low_sum);
      }
      out[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(dx, _mm512_set1_ps(stage.blocks[r].dmin)),
                                out[r]);
    }
  }
}

// One group of 16 weight rows from n0 against every activation row; y [rows, n] fp32.
template <class Fmt, bool kWide>
MOONCAKE_TILE_CODE void tile_group(const uint8_t* raw, const TileActivations& x, const WideIndex<Fmt>& index,
                                   const ScaleBytes<Fmt>& bytes, float* y, int64_t rows, int64_t n0, int64_t k,
                                   int64_t n) {
  const int64_t sbs = k / 256, live = std::min<int64_t>(16, n - n0);
  Stage stage;
  alignas(64) int32_t c[4][16][16];
  __m512 out[16];
  for (int r = 0; r < 16; ++r) out[r] = _mm512_setzero_ps();
  std::fill_n(&stage.low[live][0], (16 - live) * 256, uint8_t{0});
  std::fill_n(&stage.high[live][0], (16 - live) * 256, int8_t{0});
  for (int64_t sb = 0; sb < sbs; ++sb) {
    expand_stage<Fmt>(raw, index, bytes, n0, live, sbs, sb, &stage);
    multiply_stage<kWide>(stage, x, sb, c);
    finish_stage<Fmt, kWide>(stage, x, sb, live, c, out);
  }
  if (live == 16) {  // out[r] holds weight row r's 16 activation rows: transposed, one store per row of y
    __m512i words[16];
    for (int r = 0; r < 16; ++r) words[r] = _mm512_castps_si512(out[r]);
    transpose16(words);
    for (int64_t m = 0; m < rows; ++m) _mm512_storeu_si512(y + m * n + n0, words[m]);
    return;
  }
  alignas(64) float lanes[16];
  for (int r = 0; r < live; ++r) {
    _mm512_store_ps(lanes, out[r]);
    for (int64_t m = 0; m < rows; ++m) y[m * n + n0 + r] = lanes[m];
  }
}

// y [rows, n] fp32 = quantized x @ W^T for 1-16 rows, as int8_multiply / int16_multiply compute it; x laid
// out by tile_activations (wide: int16 activations).
template <class Fmt>
void tile_multiply(const TileActivations& x, const uint8_t* raw, float* y, int64_t rows, int64_t k, int64_t n,
                   bool wide) {
  const WideIndex<Fmt> index;
  const ScaleBytes<Fmt> bytes;
  at::parallel_for(0, (n + 15) / 16, 4, [&](int64_t begin, int64_t end) {
    const TileConfig config = full_tiles(8);  // A: 16 weight rows x 64 K; B: 16 K/4 x 16 rows; C: 16 x 16
    _tile_loadconfig(&config);
    for (int64_t g = begin; g < end; ++g) {
      if (wide) {
        tile_group<Fmt, true>(raw, x, index, bytes, y, rows, g * 16, k, n);
      } else {
        tile_group<Fmt, false>(raw, x, index, bytes, y, rows, g * 16, k, n);
      }
    }
    _tile_release();
  });
}

}  // namespace mooncake_avx512
