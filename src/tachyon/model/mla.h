// DeepSeek-V3's multi-head latent attention on the CPU reference, in the non-absorbed form that
// transformers' DeepseekV3Attention computes: the compressed kv latent is expanded back to
// per-head keys and values, so attention itself is ordinary causal attention (AttentionBackend)
// with keys of qk_nope + qk_rope dims and values of v_head_dim.
//
//   q            = q_b_proj(rms_norm(q_a_proj(x), q_a_layernorm))   (or q_proj(x) without q LoRA)
//                  per head [q_nope | q_pe]                           [n, heads, qk_nope + qk_rope]
//   [c_kv | k_pe] = kv_a_proj_with_mqa(x)                            [n, kv_lora_rank + qk_rope]
//   kv           = kv_b_proj(rms_norm(c_kv, kv_a_layernorm))
//                  per head [k_nope | v]                              [n, heads, qk_nope + v_head_dim]
//   q_pe, k_pe   = rope(q_pe), rope(k_pe); with rope_interleave the pairs (x0, x1), (x2, x3) ...
//                  are first de-interleaved to [x0, x2, ... | x1, x3, ...] (transformers'
//                  apply_rotary_pos_emb_interleave); cos/sin carry YaRN's attention scaling
//   key          = [k_nope_h | k_pe] (k_pe shared by every head), query = [q_nope_h | q_pe_h]
// The softmax scale (qk_head_dim^-0.5 * YaRN mscale^2) is attention_shape's. mla_project_latent
// stops before kv_b_proj: what it returns is what the latent cache holds, and the absorbed form
// (mla_absorbed.h) attends over it; mla_project expands it for the decompressed form.
// Tests: tests/unit/test_deepseek.cpp (against an explicit per-head double reference) and
// tests/unit/test_mla_latent.cpp (absorbed against decompressed).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/model/model_config.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model {

// One attention layer's queries, keys and values for n tokens (also what the dense q/k/v
// projections produce, so the attention block after them is shared).
struct QkvProjections {
  std::vector<float> q;  // [n, heads, qk_nope + qk_rope], rope applied
  std::vector<float> k;  // [n, heads, qk_nope + qk_rope], rope applied
  std::vector<float> v;  // [n, heads, v_head_dim]
};

// MLA's projections before kv_b_proj: the queries, and the one latent row per token that every
// head shares.
// The eps of q_a_layernorm and kv_a_layernorm: transformers builds both with RMSNorm's default
// (1e-6) whatever config.rms_norm_eps says (that one is the decoder norms'); GLM-5's is 1e-5.
inline constexpr float kMlaLatentNormEps = 1e-6f;

struct MlaLatentProjections {
  std::vector<float> q;       // [n, heads, qk_nope + qk_rope], rope applied to the q_pe part
  std::vector<float> latent;  // [n, kv_lora_rank + qk_rope] = [kv_a_layernorm(c_kv) | rope(k_pe)]
  // [n, q_lora_rank] = q_a_layernorm(q_a_proj(x)), the q LoRA latent that DeepSeek-V3.2's indexer
  // also reads (dsa_indexer.h); empty without q LoRA.
  std::vector<float> q_lora;
};

// x: [n, hidden], the input-normed hidden states; positions: [n]; inv_freq: [qk_rope / 2].
MlaLatentProjections mla_project_latent(const ModelConfig& config, const LayerWeights& w,
                                        std::span<const float> inv_freq, std::span<const float> x,
                                        std::span<const int64_t> positions);

// The same, expanded through kv_b_proj to per-head keys and values (the decompressed form).
QkvProjections mla_project(const ModelConfig& config, const LayerWeights& w, std::span<const float> inv_freq,
                           std::span<const float> x, std::span<const int64_t> positions);

}  // namespace tachyon::model
