#include "tachyon/runner/model_runner.h"

#include "tachyon/base/check.h"

namespace tachyon::runner {

void ModelRunner::supply_token_masks(std::span<const core::AllowedTokens>) {
  TACHYON_CHECK(false) << "internal: supply_token_masks() on a runner that does not take late token masks";
}

void SynchronousModelRunner::launch(const core::StepPlan& plan) {
  TACHYON_CHECK(pending_.size() < 2) << "internal: launch() with two steps in flight; call wait() first";
  TACHYON_CHECK(!awaiting_masks_) << "internal: launch() before the last launched step's token masks were supplied";
  bool masks_follow = false;
  for (const core::ScheduledSequence& s : plan.sequences) masks_follow |= s.mask_follows;
  if (plan.deferred_tokens.empty() && !masks_follow) {
    run_and_keep(plan);
    return;
  }
  core::StepPlan resolved = plan;
  for (const core::DeferredToken& d : plan.deferred_tokens) {
    TACHYON_CHECK(d.sampled_index >= 0 && d.sampled_index < static_cast<int64_t>(last_sampled_.size()) &&
                  d.token_index >= 0 && d.token_index < resolved.num_tokens())
        << "internal: deferred token " << d.token_index << " <- sampled row " << d.sampled_index << " of "
        << last_sampled_.size();
    resolved.token_ids[static_cast<size_t>(d.token_index)] = last_sampled_[static_cast<size_t>(d.sampled_index)];
  }
  resolved.deferred_tokens.clear();
  if (masks_follow) {
    awaiting_masks_ = std::move(resolved);
    return;
  }
  run_and_keep(resolved);
}

void SynchronousModelRunner::supply_token_masks(std::span<const core::AllowedTokens> masks) {
  TACHYON_CHECK(awaiting_masks_) << "internal: supply_token_masks() without a launched step whose masks follow";
  core::StepPlan plan = std::move(*awaiting_masks_);
  awaiting_masks_.reset();
  size_t next = 0;
  for (core::ScheduledSequence& s : plan.sequences) {
    if (!s.mask_follows) continue;
    TACHYON_CHECK(next < masks.size()) << "internal: " << masks.size() << " token masks for more sequences whose mask follows";
    s.allowed_tokens = masks[next++];
    s.mask_follows = false;
  }
  TACHYON_CHECK(next == masks.size()) << "internal: " << masks.size() << " token masks for " << next
                                      << " sequences whose mask follows";
  run_and_keep(plan);
}

void SynchronousModelRunner::run_and_keep(const core::StepPlan& plan) {
  core::StepOutput output = run(plan);
  last_sampled_.clear();
  for (const core::SequenceOutput& s : output.sequences) last_sampled_.push_back(s.tokens.back().token);
  pending_.push_back(std::move(output));
}

core::StepOutput SynchronousModelRunner::wait() {
  TACHYON_CHECK(!pending_.empty()) << "internal: wait() without a launched step"
                                   << (awaiting_masks_ ? " (the last one still waits for its token masks)" : "");
  core::StepOutput output = std::move(pending_.front());
  pending_.pop_front();
  return output;
}

}  // namespace tachyon::runner
