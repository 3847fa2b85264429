// Causal attention of DeepSeek's MLA in the absorbed form, over the compressed latent cache.
// Why this form exists: the decompressed form caches and reads, per token, a key of qk_nope +
// qk_rope and a value of v_head_dim for every head (128 x (192 + 128) = 40960 values for
// DeepSeek-V3); the absorbed form caches one row shared by all heads, [c_kv | k_pe] of
// kv_lora_rank + qk_rope = 576 values, and decode, which is bound by reading the cache, reads
// 71x fewer bytes. The per-head up-projections move to the query (q_nope @ W_uk) and to the
// output (out_latent @ W_uv^T), model/mla_absorbed.h; what is left here is multi-query
// attention whose key is the whole latent row and whose value is its first kv_lora_rank dims:
//   score(i, h, t) = scale * (q[i, h, :rank] . c_kv[t] + q[i, h, rank:] . k_pe[t])
//   out[i, h]      = sum_t softmax_t(score) * c_kv[t]
// The reference for the GPU's latent kernels: plain loops, softmax in f32 with the max subtracted.
// Test: tests/unit/test_mla_latent.cpp (against a double-precision per-head reference).
#pragma once

#include <cstdint>

namespace tachyon::kernels::cpu {

struct MlaAttentionShape {
  int64_t num_queries = 0;     // new tokens of this sequence
  int64_t first_position = 0;  // position of query 0; query i sits at first_position + i
  int64_t num_heads = 0;
  int64_t kv_lora_rank = 0;    // c_kv's width: the value and output width, the key's first part
  int64_t rope_dim = 0;        // k_pe's width (qk_rope_head_dim): the key's rotated tail
  float scale = 1.0f;          // the decompressed form's: qk_head_dim^-0.5 (times YaRN mscale^2)
};

// out: [num_queries, num_heads, kv_lora_rank]; q: [num_queries, num_heads, kv_lora_rank +
// rope_dim] = [q_nope @ W_uk | q_pe]; latent_cache: [>= first_position + num_queries,
// kv_lora_rank + rope_dim] = [c_kv | k_pe], rows 0 .. first_position + num_queries - 1 written.
void mla_attention(float* out, const float* q, const float* latent_cache, const MlaAttentionShape& shape);

// The same for one sequence of a paged cache: latent_cache: [num_blocks * block_size, kv_lora_rank
// + rope_dim]; token j lives at row block_table[j / block_size] * block_size + j % block_size.
void paged_mla_attention(float* out, const float* q, const float* latent_cache, const int32_t* block_table,
                         int32_t block_size, const MlaAttentionShape& shape);

}  // namespace tachyon::kernels::cpu
