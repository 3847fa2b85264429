#include "tachyon/model/decode_bytes.h"

#include <algorithm>

#include "tachyon/kernels/fp8_latent_layout.h"
#include "tachyon/model/layer_plan.h"

namespace tachyon::model {

double decode_step_min_bytes(const ModelConfig& c, int64_t batch, int64_t context, bool fp8_projections,
                             bool fp8_kv_cache, bool fp8_routed_experts) {
  const double h = static_cast<double>(c.hidden_size);
  const double tokens = static_cast<double>(context) * static_cast<double>(batch);
  double weights = static_cast<double>(c.vocab_size) * h + h;  // LM head, final norm
  double projections = 0.0;  // the values an FP8 run holds in FP8 (model/fp8_projections.h)
  double cache = 0.0;        // bytes of latent rows and index keys read per step
  double dense_cache = 0.0;  // dense attention's K and V values read per step (FP8 with fp8_kv_cache)
  for (const LayerKinds& kinds : layer_plan(c)) {
    weights += 2.0 * h;  // the layer's two norms
    if (kinds.attention == AttentionKind::kLatent) {
      const double heads = static_cast<double>(c.num_attention_heads);
      const double qk = static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim);
      const double rank = static_cast<double>(c.kv_lora_rank);
      const double latent = rank + static_cast<double>(c.qk_rope_head_dim);
      const double latent_row_bytes =
          fp8_kv_cache ? static_cast<double>(kernels::fp8_latent_row_bytes(static_cast<int32_t>(c.kv_lora_rank),
                                                                           static_cast<int32_t>(c.qk_rope_head_dim)))
                       : 2.0 * latent;
      projections += c.q_lora_rank > 0 ? c.q_lora_rank * (h + heads * qk) : h * heads * qk;  // q path
      weights += c.q_lora_rank > 0 ? c.q_lora_rank : 0;                                        // q_a norm
      projections += h * latent;                                                                // kv_a
      weights += rank * (1.0 + heads * static_cast<double>(c.qk_nope_head_dim + c.v_head_dim));  // norm, kv_b
      projections += heads * static_cast<double>(c.v_head_dim) * h;                            // o_proj
      double rows = static_cast<double>(context);                // latent rows attention reads
      if (kinds.indexer != IndexerKind::kNone) {
        rows = std::min<double>(rows, static_cast<double>(c.index_topk));
        if (kinds.indexer == IndexerKind::kFull) {  // GLM-5's shared layers reuse another layer's selection
          const double dim = static_cast<double>(c.index_head_dim), index_heads = static_cast<double>(c.index_n_heads);
          weights += c.q_lora_rank * index_heads * dim + h * (dim + index_heads) + 2.0 * dim;
          const double key_bytes =
              fp8_kv_cache ? static_cast<double>(kernels::fp8_index_key_bytes(static_cast<int32_t>(c.index_head_dim)))
                           : 2.0 * dim;
          cache += static_cast<double>(context) * key_bytes * static_cast<double>(batch);
        }
      }
      cache += rows * latent_row_bytes * static_cast<double>(batch);
    } else {
      projections += h * static_cast<double>(c.q_size() + 2 * c.kv_size()) + static_cast<double>(c.q_size()) * h;
      dense_cache += 2.0 * static_cast<double>(c.kv_size()) * tokens;
    }
    if (kinds.mlp == MlpKind::kExperts) {
      const double active = std::min<double>(static_cast<double>(c.num_experts),
                                             static_cast<double>(batch) * static_cast<double>(c.num_experts_per_tok));
      const double expert = 3.0 * h * static_cast<double>(c.moe_intermediate_size);
      weights += static_cast<double>(c.num_experts) * h;  // router
      (fp8_routed_experts ? projections : weights) += active * expert;
      projections += static_cast<double>(c.n_shared_experts) * expert;
    } else {
      projections += 3.0 * h * static_cast<double>(c.intermediate_size);
    }
  }
  // bf16: 2 bytes a value; FP8: 1 byte and a 4-byte factor per 128 values.
  const double projection_bytes = fp8_projections ? 1.0 + 4.0 / 128.0 : 2.0;
  const double dense_cache_bytes = fp8_kv_cache ? 1.0 + 4.0 / static_cast<double>(c.head_dim) : 2.0;
  return 2.0 * weights + cache + projection_bytes * projections + dense_cache_bytes * dense_cache;
}

}  // namespace tachyon::model
