// The prologue of DeepSeek-V3's latent attention (MLA, absorbed form) on the GPU: the latent
// cache row of each new token ([kv_a_layernorm(c_kv) | rope(k_pe)], one row shared by every
// head) and the rope part of each head's absorbed query. CPU twin: model/mla.h
// mla_project_latent, whose `latent` rows are what the cache holds and whose q_pe is what lands
// in the query's rope part (model/mla_absorbed.h absorb_queries passes it through).
//
// RoPE is the rotate_half form with cos/sin(position * inv_freq[i]) * attention_scaling (YaRN's
// mscale; model/rope.h rope_attention_scaling). With `interleave` (config rope_interleave, as
// DeepSeek-V3 ships) the input pairs (x0, x1), (x2, x3), ... are de-interleaved first, as
// transformers' apply_rotary_pos_emb_interleave and mla.cpp do, so the output is in the
// rotate_half layout either way:
//   out[i] = x[2i] cos_i - x[2i+1] sin_i,  out[half + i] = x[2i+1] cos_i + x[2i] sin_i   (interleave)
//   out[i] = x[i] cos_i - x[half+i] sin_i, out[half + i] = x[half+i] cos_i + x[i] sin_i  (otherwise)
// The rotation is f32 without fused multiply-adds (the CPU's arithmetic) and rounds once.
// The norm rounds like HF's bf16 RMSNorm (and kernels/cuda/rms_norm.h): f32 sum of squares,
// normalized value rounded to bf16, times the bf16 weight, rounded again.
// Test: tests/gpu/test_mla_rope.cpp.
#pragma once

#include <cstdint>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// cache: [num_slots, rank + rope_dim] bf16 (the paged latent cache viewed as rows: slot =
//   block * block_size + offset); row slots[t] receives token t's [c_kv | k_pe]; slots[t] < 0
//   skips the token (padding rows of a CUDA graph).
// kv_a: [num_tokens, rank + rope_dim] bf16, kv_a_proj_with_mqa's output [c_kv | k_pe];
//   c_kv = rms_norm(kv_a[:, :rank]) * norm_weight (eps), k_pe = rope(kv_a[:, rank:]).
// norm_weight: [rank] bf16 (kv_a_layernorm); inv_freq: [rope_dim / 2] f32 (model/rope.h);
// positions, slots: [num_tokens] int32.
// rank % 8 == 0 and 8 <= rank <= 1024; rope_dim % 8 == 0 and rope_dim <= 512; cache, kv_a and
// norm_weight 16-byte aligned (checked); num_tokens == 0 launches nothing. cache must not
// overlap kv_a.
void mla_store_latent(bf16* cache, const bf16* kv_a, const bf16* norm_weight, float eps, const float* inv_freq,
                      float attention_scaling, bool interleave, const int32_t* positions, const int32_t* slots,
                      int64_t num_tokens, int32_t rank, int32_t rope_dim, cudaStream_t stream);

// The same row into the FP8 latent cache (--kv-cache-dtype fp8; kernels/cuda/mla_attention.h
// PagedLatentView): the bf16 c_kv the bf16 cache would hold, as E4M3 codes [num_slots, rank]
// (RNE of value / factor, saturated) with one f32 factor per 128 values (amax / 448, 1 for all zeros) in
// scales [num_slots, fp8_latent_scale_stride(rank)], k_pe as bf16 in rope [num_slots, rope_dim].
// rank a multiple of 16; every plane 16-byte aligned (checked). CPU twin: the FP8 rows of
// runner/paged_attention_backend.h (tensor/fp8.h fp8_block_round_trip per 128 values).
void mla_store_latent_fp8(uint8_t* codes, float* scales, bf16* rope, const bf16* kv_a, const bf16* norm_weight,
                          float eps, const float* inv_freq, float attention_scaling, bool interleave,
                          const int32_t* positions, const int32_t* slots, int64_t num_tokens, int32_t rank,
                          int32_t rope_dim, cudaStream_t stream);

// q: [num_tokens, num_heads, nope + rope_dim] bf16 (q_b_proj / q_proj output, per head
//   [q_nope | q_pe]); q_absorbed: [num_tokens, num_heads, rank + rope_dim] bf16.
// Writes rope(q[t, h, nope:]) to q_absorbed[t, h, rank:]; q_absorbed[t, h, :rank] is not touched
// (the batched W_uk product writes it). inv_freq, positions as above.
// rope_dim even and <= 512; num_heads >= 1 (checked); num_tokens == 0 launches nothing.
// q_absorbed must not overlap q.
void mla_rope_queries(bf16* q_absorbed, const bf16* q, const float* inv_freq, float attention_scaling, bool interleave,
                      const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t nope, int32_t rank,
                      int32_t rope_dim, cudaStream_t stream);

}  // namespace tachyon::kernels::cuda
