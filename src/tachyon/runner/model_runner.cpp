#include "tachyon/runner/model_runner.h"

#include "tachyon/base/check.h"

namespace tachyon::runner {

void SynchronousModelRunner::launch(const core::StepPlan& plan) {
  TACHYON_CHECK(!pending_) << "internal: launch() while a step is in flight; call wait() first";
  pending_ = run(plan);
}

core::StepOutput SynchronousModelRunner::wait() {
  TACHYON_CHECK(pending_) << "internal: wait() without a launched step";
  core::StepOutput output = std::move(*pending_);
  pending_.reset();
  return output;
}

}  // namespace tachyon::runner
