#include "tachyon/runner/cpu_model_runner.h"

#include "tachyon/runner/plan_sampling.h"

namespace tachyon::runner {

CpuModelRunner::CpuModelRunner(const model::DenseModel& model, int32_t num_blocks, int32_t block_size,
                               model::MlaAttentionForm mla_form)
    : model_(model), cache_(model.config(), num_blocks, block_size, mla_form) {}

CpuModelRunner::CpuModelRunner(std::unique_ptr<model::DenseModel> model, int32_t num_blocks, int32_t block_size,
                               model::MlaAttentionForm mla_form)
    : owned_(std::move(model)), model_(*owned_), cache_(model_.config(), num_blocks, block_size, mla_form) {}

core::StepOutput CpuModelRunner::run(const core::StepPlan& plan) {
  if (plan.empty()) return {};
  PagedAttentionBackend attention(model_.config(), cache_, plan);
  std::vector<float> logits =
      model_.forward(model::ForwardBatch{plan.token_ids, plan.positions, plan.logits_rows}, attention);
  return sample_plan_rows(plan, logits, model_.config().vocab_size);
}

}  // namespace tachyon::runner
