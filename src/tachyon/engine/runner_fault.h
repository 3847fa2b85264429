// A runner wrapper that throws on its Nth launch() or wait(): the one way tests make a runner
// fail on the CPU the way a device runner fails (an exception out of the step), directly or
// through TACHYON_RUNNER_FAULT, a test-only switch that app::load_runner reads (docs/testing.md).
// "launch:N" throws from the Nth launch, "wait:N" from the Nth wait, which asynchronous
// scheduling reaches when it collects the step in flight. Counting starts at 1; every call after
// the fault throws too, as a broken device would.
// Test: tests/unit/test_engine_failure.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "tachyon/runner/model_runner.h"

namespace tachyon::engine {

struct RunnerFault {
  enum class Where { kNone, kLaunch, kWait };
  Where where = Where::kNone;
  int64_t call = 0;  // the failing call, counted from 1
};

// "launch:N" or "wait:N" (N >= 1); "" is no fault. Throws Error naming the accepted forms.
RunnerFault parse_runner_fault(const std::string& text);
// TACHYON_RUNNER_FAULT, read once by the caller at start-up.
RunnerFault runner_fault_from_env();

class FaultInjectingRunner : public runner::ForwardingModelRunner {
 public:
  FaultInjectingRunner(std::unique_ptr<runner::ModelRunner> inner, RunnerFault fault);
  void launch(const core::StepPlan& plan) override;
  core::StepOutput wait() override;

 private:
  void count(RunnerFault::Where where, int64_t& calls);

  RunnerFault fault_;
  int64_t launches_ = 0;
  int64_t waits_ = 0;
};

// `runner` wrapped when `fault` names one, else `runner` itself.
std::unique_ptr<runner::ModelRunner> with_runner_fault(std::unique_ptr<runner::ModelRunner> runner, RunnerFault fault);

}  // namespace tachyon::engine
