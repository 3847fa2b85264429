#include "tachyon/runner/cpu_model_runner.h"

#include "tachyon/base/check.h"

namespace tachyon::runner {

CpuModelRunner::CpuModelRunner(const model::DenseModel& model, int32_t num_blocks, int32_t block_size,
                               model::MlaAttentionForm mla_form)
    : model_(model), cache_(model.config(), num_blocks, block_size, mla_form) {}

CpuModelRunner::CpuModelRunner(std::unique_ptr<model::DenseModel> model, int32_t num_blocks, int32_t block_size,
                               model::MlaAttentionForm mla_form)
    : owned_(std::move(model)), model_(*owned_), cache_(model_.config(), num_blocks, block_size, mla_form) {}

std::vector<engine::SampledToken> sample_plan_rows(const engine::StepPlan& plan, std::span<float> logits,
                                                   int64_t vocab) {
  std::vector<engine::SampledToken> sampled;
  size_t row = 0;
  for (const engine::ScheduledSequence& sequence : plan.sequences) {
    if (!sequence.sample) continue;
    std::span<float> row_logits(logits.data() + static_cast<int64_t>(row++) * vocab, static_cast<size_t>(vocab));
    engine::SamplingContext context{sequence.prompt_tokens, sequence.output_tokens, sequence.seed,
                                    sequence.eos_token_id};
    sampled.push_back(engine::sample_token(row_logits, *sequence.params, context));
  }
  TACHYON_CHECK(sampled.size() == plan.logits_rows.size()) << "internal: sampled rows disagree with the plan";
  return sampled;
}

std::vector<engine::SampledToken> CpuModelRunner::execute(const engine::StepPlan& plan) {
  if (plan.empty()) return {};
  PagedAttentionBackend attention(model_.config(), cache_, plan);
  std::vector<float> logits =
      model_.forward(model::ForwardBatch{plan.token_ids, plan.positions, plan.logits_rows}, attention);
  return sample_plan_rows(plan, logits, model_.config().vocab_size);
}

}  // namespace tachyon::runner
