// Every native op's schema, in one place for both libraries. Each library compiles this file with its own
// -D: mooncake_avx512 (AVX512-BF16, AMX optional) and mooncake_avx2 (AVX2, FMA, F16C only) are separate
// shared objects, and an op namespace may be defined only once per process. The kernels register their
// implementations beside their code (TORCH_LIBRARY_IMPL); the ops without tensor arguments, which the
// dispatcher cannot route by device, are bound here.
#include <torch/library.h>

#if defined(MOONCAKE_AVX512)
#include "../avx512/block_kernels.h"
#include "../avx512/kquant_tiles.h"

TORCH_LIBRARY(mooncake_avx512, m) {
  // Q4_0/Q4_1 and Q8_0 blocks (levels with (d, m) pairs), bf16 activations.
  m.def("block_linear(Tensor x, Tensor levels, Tensor dm, Tensor? bias, bool amx, bool batch=False) -> Tensor");
  m.def("max_rows(bool amx) -> int", &mooncake_avx512::max_rows);
  // K-quant super-blocks as the file stores them.
  m.def("kquant_linear(Tensor x, Tensor raw, int kind, Tensor? bias, bool amx, bool batch=False, int activations=0) -> Tensor");
  m.def("kquant_dequantize(Tensor raw, int kind, int k) -> Tensor");
  m.def("kquant_integer_linear(Tensor x, Tensor raw, int kind, int activations, bool tiles) -> Tensor");
  m.def("integer_tiles_available() -> bool", &mooncake_avx512::amx_int8_available);
  // Dense bf16 weights on AMX tiles.
  m.def("pack_tiles(Tensor weight) -> Tensor");
  m.def("tile_linear(Tensor x, Tensor packed, int n, Tensor? bias) -> Tensor");
  m.def("amx_available() -> bool", &mooncake_avx512::amx_available);
  // Whole steps: the fused decoder layers and prompt attention over the paged KV cache.
  m.def(
      "decode_layers(Tensor token_ids, Tensor positions, Tensor embedding, Tensor cos_table, Tensor sin_table, "
      "Tensor slots, Tensor block_tables, Tensor[] k_caches, Tensor[] v_caches, Tensor[] norms, "
      "Tensor[] weights, Tensor[] dms, int[] kinds, int[] counts, int num_heads, int num_kv_heads, float eps, "
      "float scale, bool amx, int activations) -> Tensor");
  m.def(
      "prompt_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor tables, Tensor chunks, float scale, "
      "int window=0, float softcap=0.0) -> Tensor");
}

#elif defined(MOONCAKE_AVX2)

TORCH_LIBRARY(mooncake_avx2, m) {
  m.def("block_linear(Tensor x, Tensor levels, Tensor dm, Tensor? bias, bool wide) -> Tensor");
  m.def("kquant_linear(Tensor x, Tensor raw, int kind, Tensor? bias, bool wide) -> Tensor");
  m.def("quantized_input(Tensor x, int block, bool wide) -> Tensor");
  // Attention of a step's rows over the paged KV cache, each row one way whatever its step (fp32 queries).
  m.def(
      "paged_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor tables, Tensor chunks, float scale, "
      "int window=0, float softcap=0.0) -> Tensor");
  // Every decoder layer of a decode batch in one call (fp32 activations, hidden states of the rows' tokens in).
  m.def(
      "decode_layers(Tensor hidden, Tensor positions, Tensor cos, Tensor sin, Tensor slots, Tensor block_tables, "
      "Tensor[] k_caches, Tensor[] v_caches, Tensor[] norms, Tensor[] weights, Tensor[] dms, int[] kinds, "
      "int[] counts, int num_heads, int num_kv_heads, float eps, float scale, bool wide) -> Tensor");
}

#else
#error "compile with -DMOONCAKE_AVX512 or -DMOONCAKE_AVX2 (kernels/build.py does)"
#endif
