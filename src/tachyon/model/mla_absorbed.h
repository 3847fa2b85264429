// DeepSeek-V3's latent attention in the absorbed form: what serving engines run, because the
// cache then holds one [c_kv | k_pe] row per token shared by all heads (kv_lora_rank + qk_rope =
// 576 values for DeepSeek-V3) instead of every head's key and value (128 x (192 + 128)), and
// decode, which is bound by reading the cache, reads that much less.
//
// kv_b_proj's weight [heads * (qk_nope + v_head_dim), kv_lora_rank] is, per head h, W_uk_h
// [qk_nope, kv_lora_rank] stacked on W_uv_h [v_head_dim, kv_lora_rank]. Since
//   q_nope_h . (W_uk_h c_kv) = (q_nope_h W_uk_h) . c_kv   and   sum_t p_t W_uv_h c_kv[t] = W_uv_h sum_t p_t c_kv[t],
// the up-projections move off the cached tokens: the query is absorbed once per new token
// (q_latent_h = q_nope_h @ W_uk_h), attention runs over the latents (kernels/mla_attention.h),
// and the attended latent is expanded once per new token (out_h = out_latent_h @ W_uv_h^T).
// Mathematically the decompressed form (mla.h); in f32 they agree to rounding.
// Test: tests/unit/test_mla_latent.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/model/attention_backend.h"
#include "tachyon/model/mla.h"
#include "tachyon/model/model_config.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model {

// q: [n, heads, qk_nope + qk_rope] (rope applied) -> [n, heads, kv_lora_rank + qk_rope] =
// [q_nope_h @ W_uk_h | q_pe_h].
std::vector<float> absorb_queries(const ModelConfig& config, const LayerWeights& w, std::span<const float> q);

// out_latent: [n, heads, kv_lora_rank] -> [n, heads, v_head_dim] = out_latent_h @ W_uv_h^T.
std::vector<float> expand_attended(const ModelConfig& config, const LayerWeights& w,
                                   std::span<const float> out_latent);

// Stores the projections' latent rows in `attention`'s cache and returns the attended values
// [n, heads, v_head_dim], what o_proj reads (as the decompressed form's attend writes).
std::vector<float> mla_attend_absorbed(const ModelConfig& config, const LayerWeights& w, int64_t layer,
                                       const MlaLatentProjections& projected, AttentionBackend& attention);

// The same restricted, per new token, to the tokens DSA's indexer kept (kept: [n, index_topk],
// dsa_indexer.h's dsa_select_tokens): DeepSeek-V3.2's sparse attention. Unlike
// mla_attend_absorbed it does not store the latent: the caller stores it before the indexer
// selects (dense_model.cpp says why).
std::vector<float> mla_attend_sparse(const ModelConfig& config, const LayerWeights& w, int64_t layer,
                                     const MlaLatentProjections& projected, std::span<const int32_t> kept,
                                     AttentionBackend& attention);

}  // namespace tachyon::model
