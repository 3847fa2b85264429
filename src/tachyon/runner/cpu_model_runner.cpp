#include "tachyon/runner/cpu_model_runner.h"

#include <omp.h>

#include <cstdlib>

#include "tachyon/model/decode_bytes.h"
#include "tachyon/runner/cpu_threads.h"
#include "tachyon/runner/plan_sampling.h"

namespace tachyon::runner {

CpuModelRunner::CpuModelRunner(const model::DenseModel& model, int32_t num_blocks, int32_t block_size,
                               model::MlaAttentionForm mla_form, bool fp8_kv_cache)
    : model_(model),
      cache_(model.config(), num_blocks, block_size, mla_form, fp8_kv_cache),
      threads_(cpu_forward_threads(model::decode_step_min_bytes(model.config(), 1, 0), omp_get_num_procs(),
                                   std::getenv("OMP_NUM_THREADS"))) {}

CpuModelRunner::CpuModelRunner(std::unique_ptr<model::DenseModel> model, int32_t num_blocks, int32_t block_size,
                               model::MlaAttentionForm mla_form, bool fp8_kv_cache)
    : CpuModelRunner(*model, num_blocks, block_size, mla_form, fp8_kv_cache) {
  owned_ = std::move(model);
}

core::StepOutput CpuModelRunner::run(const core::StepPlan& plan) {
  if (plan.empty()) return {};
  const std::lock_guard<std::mutex> lock(forward_mutex_);
  if (threads_ > 0) omp_set_num_threads(threads_);  // per calling thread: the engine's, not the constructor's
  PagedAttentionBackend attention(model_.config(), cache_, plan);
  // Every row's last hidden state before the final norm, when the plan asks (an MTP drafter).
  std::vector<float> hidden;
  const model::ForwardHook hook = plan.return_hidden_states ? model::keep_final_hidden(hidden) : nullptr;
  logits_ = model_.forward(model::ForwardBatch{plan.token_ids, plan.positions, plan.logits_rows}, attention, hook,
                           std::move(logits_));
  core::StepOutput output = sample_plan_rows(plan, logits_, model_.config().vocab_size);
  output.hidden_states = std::move(hidden);
  return output;
}

std::vector<float> CpuModelRunner::final_hidden_states(std::span<const int32_t> tokens) {
  const std::lock_guard<std::mutex> lock(forward_mutex_);
  if (threads_ > 0) omp_set_num_threads(threads_);  // per calling thread: an HTTP thread's here
  return model_.final_hidden_states(tokens);
}

}  // namespace tachyon::runner
