// AMX tile set-up shared by the tile kernels (block_kernels.h, tile_linear.cpp).
//
// Why a kernel never mixes tiles and registers by row count: a tile multiply-add (TDPBF16PS) accumulates
// each output element on its own, from its row of A and its column of B, but with the hardware's own
// internal order and rounding, which no sequence of AVX-512 instructions reproduces (measured: 16-32% of
// elements differ from every sequential or pairwise fp32 emulation tried). So a row gets the same bits at
// any row count only if every row count takes one path: for tiles, the same K blocks in the same order,
// each accumulator starting from zero.
#pragma once

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace mooncake_avx512 {

// Linux hands a process AMX tile state only when asked (the same request oneDNN makes).
inline bool amx_available() {
  static const bool available =
      syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
  return available;
}

struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles 0..count-1 of 16 rows x 64 bytes each (16 x 16 fp32, or 16 x 32 bf16).
inline TileConfig full_tiles(int count) {
  TileConfig config;
  for (int t = 0; t < count; ++t) {
    config.rows[t] = 16;
    config.colsb[t] = 64;
  }
  return config;
}

}  // namespace mooncake_avx512
