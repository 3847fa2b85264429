// The paged KV cache of the CPU runner and the AttentionBackend that runs a StepPlan's ragged
// batch over it: K/V rows are written through the plan's slot mapping, and each scheduled
// sequence attends its own keys through its block table. An MLA model's cache holds, by default,
// one latent row per token and layer (the absorbed form, model/mla_absorbed.h); the block manager
// counts tokens, so only the per-layer row width differs between models. A DSA model's cache
// holds, per layer, a second row per token beside the latent: the indexer's key (index_head_dim
// values, ModelConfig::has_sparse_attention), written through the same slots; GLM-5's "shared"
// layers, which reuse another layer's top-k, hold none (model::index_key_storage).
#pragma once

#include <span>
#include <vector>

#include "tachyon/core/step_plan.h"
#include "tachyon/model/attention_backend.h"

namespace tachyon::runner {

// FP8 KV cache (--kv-cache-dtype fp8): the rows are stored as an FP8 cache holds them, E4M3 with
// one f32 factor (amax / 448) per group: each token's K and V per KV head; a latent row's
// kv_lora_rank part per 128 values with its RoPE part kept (the FlashMLA FP8 layout: 512 E4M3
// values, 4 factors, 64 bf16); a DSA index key per token. Here they are kept in f32 as the
// dequantized values: the CPU reference is the FP8 cache's numerics, not its memory saving.
//
// f32 rows of num_blocks * block_size slots per layer. An MLA model in the absorbed form fills
// `latents` only; any other model `keys` and `values` only (the unused ones stay empty).
struct PagedKvCache {
  PagedKvCache(const model::ModelConfig& config, int32_t num_blocks, int32_t block_size,
               model::MlaAttentionForm mla_form = model::MlaAttentionForm::kAbsorbed, bool fp8 = false);
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  bool fp8 = false;  // rows hold the values an FP8 cache would (above)
  model::MlaAttentionForm mla_form = model::MlaAttentionForm::kAbsorbed;
  int64_t kv_size = 0;      // num_kv_heads * head_dim: one token's keys (0 when latent)
  int64_t v_size = 0;       // num_kv_heads * value_head_dim: one token's values (0 when latent)
  int64_t latent_size = 0;  // kv_lora_rank + qk_rope_head_dim: one token's latent row (0 unless latent)
  int64_t index_key_size = 0;  // index_head_dim: one token's index key (0 without DSA)
  std::vector<std::vector<float>> keys;     // per layer [slots, num_kv_heads, head_dim]
  std::vector<std::vector<float>> values;   // per layer [slots, num_kv_heads, value_head_dim]
  std::vector<std::vector<float>> latents;  // per layer [slots, kv_lora_rank + qk_rope_head_dim]
  std::vector<std::vector<float>> index_keys;  // per layer [slots, index_head_dim] (DSA only; empty: shared layer)

  // What a row of one kind is stored as: `rows` ([tokens, width of the kind]) themselves, or in an
  // FP8 cache the values it holds (above), computed into `storage`, which the result then views.
  // Every writer of the cache (this file's backend, PCP's gathered rows) stores through it.
  enum class Rows { kKeys, kValues, kLatent, kIndexKeys };
  std::span<const float> as_stored(Rows kind, std::span<const float> rows, const model::ModelConfig& config,
                                   std::vector<float>& storage) const;
};

class PagedAttentionBackend : public model::AttentionBackend {
 public:
  PagedAttentionBackend(const model::ModelConfig& config, PagedKvCache& cache, const core::StepPlan& plan);
  void store_kv(int64_t layer, std::span<const float> k, std::span<const float> v) override;
  void attend(int64_t layer, std::span<const float> q, std::span<float> out) override;
  model::MlaAttentionForm mla_form() const override { return cache_.mla_form; }
  void store_latent(int64_t layer, std::span<const float> latent) override;
  void attend_latent(int64_t layer, std::span<const float> q, std::span<float> out) override;
  void store_index_keys(int64_t layer, std::span<const float> index_keys) override;
  void select_tokens(int64_t layer, std::span<const float> q, std::span<const float> weights,
                     std::span<int32_t> kept) override;
  void attend_latent_sparse(int64_t layer, std::span<const float> q, std::span<const int32_t> kept,
                            std::span<float> out) override;

 private:
  const model::ModelConfig& config_;
  PagedKvCache& cache_;
  const core::StepPlan& plan_;
};

}  // namespace tachyon::runner
