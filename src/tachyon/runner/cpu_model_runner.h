// CpuModelRunner: the reference runner. Runs the dense model's forward over the plan's ragged
// batch with the paged KV cache, then samples each `sample` row with the CPU sampler.
#pragma once

#include <memory>

#include "tachyon/model/dense_model.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/paged_attention_backend.h"

namespace tachyon::runner {

// Samples each `sample` sequence of `plan` from its row of `logits` ([plan.logits_rows.size(),
// vocab], in plan order) with the CPU sampler. Shared by the CPU and the CPU tensor-parallel runner.
std::vector<engine::SampledToken> sample_plan_rows(const engine::StepPlan& plan, std::span<float> logits,
                                                   int64_t vocab);

class CpuModelRunner : public ModelRunner {
 public:
  // `model` must outlive the runner. `mla_form` is the form an MLA model's cache holds (serving's
  // absorbed form unless a test compares it with the decompressed one); dense models ignore it.
  CpuModelRunner(const model::DenseModel& model, int32_t num_blocks, int32_t block_size,
                 model::MlaAttentionForm mla_form = model::MlaAttentionForm::kAbsorbed);
  // The same, owning the model.
  CpuModelRunner(std::unique_ptr<model::DenseModel> model, int32_t num_blocks, int32_t block_size,
                 model::MlaAttentionForm mla_form = model::MlaAttentionForm::kAbsorbed);
  std::vector<engine::SampledToken> execute(const engine::StepPlan& plan) override;
  int64_t vocab_size() const override { return model_.config().vocab_size; }

 private:
  std::unique_ptr<model::DenseModel> owned_;  // set by the owning constructor
  const model::DenseModel& model_;
  PagedKvCache cache_;
};

}  // namespace tachyon::runner
