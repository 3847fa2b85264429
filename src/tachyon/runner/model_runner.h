// ModelRunner: executes one StepPlan and returns the sampled token of every sequence the plan
// marks `sample`, in plan order. The CPU runner (cpu_model_runner.h) is the reference; the CUDA
// runner consumes the same plan. The runner reads only the plain-data headers of engine/
// (step_plan.h, sampling_params.h, sampler.h): the engine depends on the runner, not back.
#pragma once

#include <vector>

#include "tachyon/engine/sampler.h"
#include "tachyon/engine/step_plan.h"

namespace tachyon::runner {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual std::vector<engine::SampledToken> execute(const engine::StepPlan& plan) = 0;
  // Tokens the model has rows for; the engine validates prompts against it.
  virtual int64_t vocab_size() const = 0;
  // Device time of the last execute() from its upload to its download, in ms; 0 where the
  // runner has no device clock (the CPU). Benchmarks compare it with the step's wall time to
  // show the host's share.
  virtual double last_step_device_ms() const { return 0.0; }
};

}  // namespace tachyon::runner
