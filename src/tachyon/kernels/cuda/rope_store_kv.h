// The attention prologue in one pass over the fused q/k/v projection: optional per-head q/k
// RMSNorm (Qwen3), rotary embedding (HF rotate_half layout) of q and k, and the write of k and v
// into their paged-cache slots. One read of qkv, one write of q and of each K/V row, instead of
// four kernels and three round trips. CPU twins: kernels/rms_norm.h, kernels/rope.h and
// kernels/attention.h `store_kv_paged`.
#pragma once

#include <cstdint>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

struct RopeStoreKvShape {
  int64_t num_tokens = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;  // 64, 128 or 256 (the kernel is compiled per head_dim)
  float eps = 1e-6f;     // of the q/k norms
};

// q_out: [num_tokens, num_heads, head_dim] bf16, normed (when q_norm) and rotated q.
// k_cache, v_cache: [num_slots, num_kv_heads, head_dim] bf16 (a paged cache viewed as rows:
//   slot = block * block_size + offset); row slot_mapping[t] receives token t's k (normed,
//   rotated) and v. A negative slot skips the token's write (padding rows of a CUDA graph).
// qkv: [num_tokens, (num_heads + 2 * num_kv_heads) * head_dim] bf16, rows [q | k | v].
// q_norm, k_norm: [head_dim] bf16, or both nullptr (no q/k norm).
// inv_freq: [head_dim / 2] f32 (model/rope.h; angle of pair i at position p is p * inv_freq[i]).
// positions, slot_mapping: [num_tokens] int32.
// q_out, k_cache and v_cache do not overlap qkv. Every bf16 pointer 16-byte aligned (8-bf16
// vector loads), checked on the host with the shape; num_tokens == 0 launches nothing.
// Rounding: q/k norms round like HF's RMSNorm (normalized value to bf16, times the weight, to
// bf16); the rotation is f32 and rounds once; v is copied bit for bit.
void rope_store_kv(bf16* q_out, bf16* k_cache, bf16* v_cache, const bf16* qkv, const bf16* q_norm,
                   const bf16* k_norm, const float* inv_freq, const int32_t* positions,
                   const int32_t* slot_mapping, const RopeStoreKvShape& shape, cudaStream_t stream);

// The same into an FP8 cache (--kv-cache-dtype fp8): k and v, rounded to bf16 as above, stored as
// E4M3 codes [num_slots, num_kv_heads, head_dim] with one f32 factor per (slot, kv head)
// (kernels/cuda/fp8_kv.cuh: amax / 448, RNE(x / factor) saturated; the CPU reference's rounding).
struct Fp8KvRows {
  uint8_t* k = nullptr;  // 8-byte aligned
  uint8_t* v = nullptr;
  float* k_scale = nullptr;  // [num_slots, num_kv_heads]
  float* v_scale = nullptr;
};
void rope_store_kv_fp8(bf16* q_out, const Fp8KvRows& cache, const bf16* qkv, const bf16* q_norm, const bf16* k_norm,
                       const float* inv_freq, const int32_t* positions, const int32_t* slot_mapping,
                       const RopeStoreKvShape& shape, cudaStream_t stream);

}  // namespace tachyon::kernels::cuda
