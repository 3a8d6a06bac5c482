/* The KV cache as the CUDA ops see it: the same bytes as the CPU engine's cache
 * (lib/engine/engine_impl.h, Engine::Impl::k_cache / v_cache), so a layer's cache can be copied
 * between host and device either way and read by either side.
 *
 * One layer's K (or V) cache is n_ctx rows, one per position, each kv_row_bytes long:
 *   F16   kv_dim IEEE binary16 values (kv_dim = n_kv_head · head_dim), head h at element
 *         h · head_dim;                                       kv_row_bytes = 2 · kv_dim
 *   Q8_0  kv_dim / 32 ggml Q8_0 blocks of 34 bytes (an f16 scale d, then 32 int8 q; value =
 *         d · q), head h at block h · head_dim / 32 (head_dim % 32 == 0, so a head is whole
 *         blocks);                                            kv_row_bytes = 34 · kv_dim / 32
 * Row p starts at byte p · kv_row_bytes of the layer's cache; the engine keeps the layers one
 * after another ([layer][n_ctx][kv_row_bytes]), and the ops take the layer's first byte.
 * Q8_0 rows are only 2-byte aligned. */
#ifndef KAIROX_KERNELS_CUDA_KV_CACHE_CUH_
#define KAIROX_KERNELS_CUDA_KV_CACHE_CUH_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element type of the KV cache (the engine's EngineOptions::KvType). */
typedef enum kx_cuda_kv_type { KX_CUDA_KV_F16 = 0, KX_CUDA_KV_Q8_0 = 1 } kx_cuda_kv_type;

#define KX_CUDA_Q8_0_BLOCK_ELEMS 32
#define KX_CUDA_Q8_0_BLOCK_BYTES 34

/* Bytes of one position's row for kv_dim values, or 0 for an unknown type or a kv_dim the
 * type cannot hold (Q8_0: not whole blocks). */
static inline uint64_t kx_cuda_kv_row_bytes(int32_t kv_type, int64_t kv_dim) {
  if (kv_dim <= 0) return 0;
  if (kv_type == KX_CUDA_KV_F16) return (uint64_t)kv_dim * 2u;
  if (kv_type == KX_CUDA_KV_Q8_0 && kv_dim % KX_CUDA_Q8_0_BLOCK_ELEMS == 0) {
    return (uint64_t)(kv_dim / KX_CUDA_Q8_0_BLOCK_ELEMS) * KX_CUDA_Q8_0_BLOCK_BYTES;
  }
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif /* KAIROX_KERNELS_CUDA_KV_CACHE_CUH_ */
