#include "tachyon/runner/model_runner.h"

#include "tachyon/base/check.h"

namespace tachyon::runner {

void SynchronousModelRunner::launch(const core::StepPlan& plan) {
  TACHYON_CHECK(pending_.size() < 2) << "internal: launch() with two steps in flight; call wait() first";
  core::StepOutput output;
  if (plan.deferred_tokens.empty()) {
    output = run(plan);
  } else {
    core::StepPlan resolved = plan;
    for (const core::DeferredToken& d : plan.deferred_tokens) {
      TACHYON_CHECK(d.sampled_index >= 0 && d.sampled_index < static_cast<int64_t>(last_sampled_.size()) &&
                    d.token_index >= 0 && d.token_index < resolved.num_tokens())
          << "internal: deferred token " << d.token_index << " <- sampled row " << d.sampled_index << " of "
          << last_sampled_.size();
      resolved.token_ids[static_cast<size_t>(d.token_index)] = last_sampled_[static_cast<size_t>(d.sampled_index)];
    }
    resolved.deferred_tokens.clear();
    output = run(resolved);
  }
  last_sampled_.clear();
  for (const core::SequenceOutput& s : output.sequences) last_sampled_.push_back(s.tokens.back().token);
  pending_.push_back(std::move(output));
}

core::StepOutput SynchronousModelRunner::wait() {
  TACHYON_CHECK(!pending_.empty()) << "internal: wait() without a launched step";
  core::StepOutput output = std::move(pending_.front());
  pending_.pop_front();
  return output;
}

}  // namespace tachyon::runner
