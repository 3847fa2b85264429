// The paged KV cache of the CPU runner and the AttentionBackend that runs a StepPlan's ragged
// batch over it: K/V rows are written through the plan's slot mapping, and each scheduled
// sequence attends its own keys through its block table.
#pragma once

#include <vector>

#include "tachyon/engine/step_plan.h"
#include "tachyon/model/attention_backend.h"

namespace tachyon::runner {

// Per layer, keys [num_blocks * block_size, num_kv_heads, head_dim] and values
// [num_blocks * block_size, num_kv_heads, value_head_dim] f32 (the widths differ under MLA).
struct PagedKvCache {
  PagedKvCache(const model::ModelConfig& config, int32_t num_blocks, int32_t block_size);
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  int64_t kv_size = 0;  // num_kv_heads * head_dim: one token's keys
  int64_t v_size = 0;   // num_kv_heads * value_head_dim: one token's values
  std::vector<std::vector<float>> keys;
  std::vector<std::vector<float>> values;
};

class PagedAttentionBackend : public model::AttentionBackend {
 public:
  PagedAttentionBackend(const model::ModelConfig& config, PagedKvCache& cache, const engine::StepPlan& plan);
  void store_kv(int64_t layer, std::span<const float> k, std::span<const float> v) override;
  void attend(int64_t layer, std::span<const float> q, std::span<float> out) override;

 private:
  const model::ModelConfig& config_;
  PagedKvCache& cache_;
  const engine::StepPlan& plan_;
};

}  // namespace tachyon::runner
