// ModelRunner: runs one StepPlan and returns, for every sequence the plan marks `sample`, 1 +
// accepted tokens (core/step_output.h). The contract is split in two so that a device runner can
// work while the host plans:
//   launch(plan)  starts the step; the runner copies what it needs, so the plan may be destroyed
//                 or the engine's sequences changed as soon as it returns;
//   wait()        blocks until the launched step is done and returns its output.
// Exactly one step is in flight: launch, wait, launch, wait. A runner that cannot verify draft
// tokens refuses a plan that carries them (Error naming the runner). The CPU runner is the
// reference; the CUDA runner consumes the same plan. The runner reads only core/ (plain data),
// never engine/ (tests/unit/check_layers.py).
#pragma once

#include <optional>
#include <vector>

#include "tachyon/core/step_output.h"
#include "tachyon/core/step_plan.h"

namespace tachyon::runner {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual void launch(const core::StepPlan& plan) = 0;
  virtual core::StepOutput wait() = 0;
  // launch + wait; every sampled token in plan order (one per sampled sequence without drafts).
  std::vector<core::SampledToken> execute(const core::StepPlan& plan) {
    launch(plan);
    return core::flatten(wait());
  }
  // Whether launch() accepts plans with draft tokens (the engine refuses a drafter otherwise).
  virtual bool verifies_drafts() const { return false; }
  // Tokens the model has rows for; the engine validates prompts against it.
  virtual int64_t vocab_size() const = 0;
  // Device time of the last step from its upload to its download, in ms; 0 where the runner has
  // no device clock (the CPU). Benchmarks compare it with the step's wall time to show the
  // host's share.
  virtual double last_step_device_ms() const { return 0.0; }
};

// The part of a runner that runs synchronously on the calling thread (the CPU runners): launch()
// computes the step at once with run(), wait() hands its output over.
class SynchronousModelRunner : public ModelRunner {
 public:
  bool verifies_drafts() const override { return true; }  // the CPU sampler verifies them
  void launch(const core::StepPlan& plan) final;
  core::StepOutput wait() final;

 protected:
  virtual core::StepOutput run(const core::StepPlan& plan) = 0;

 private:
  std::optional<core::StepOutput> pending_;
};

}  // namespace tachyon::runner
