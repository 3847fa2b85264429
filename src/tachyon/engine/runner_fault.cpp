#include "tachyon/engine/runner_fault.h"

#include <cstdlib>

#include "tachyon/base/check.h"

namespace tachyon::engine {

RunnerFault parse_runner_fault(const std::string& text) {
  if (text.empty()) return {};
  const size_t colon = text.find(':');
  const std::string where = text.substr(0, colon);
  int64_t call = 0;
  try {
    size_t used = 0;
    if (colon != std::string::npos) call = std::stoll(text.substr(colon + 1), &used);
    if (colon == std::string::npos || used != text.size() - colon - 1) call = 0;
  } catch (const std::exception&) {
    call = 0;
  }
  TACHYON_CHECK((where == "launch" || where == "wait") && call >= 1)
      << "TACHYON_RUNNER_FAULT=" << text << ": give launch:N or wait:N with N >= 1";
  return {where == "launch" ? RunnerFault::Where::kLaunch : RunnerFault::Where::kWait, call};
}

RunnerFault runner_fault_from_env() {
  const char* value = std::getenv("TACHYON_RUNNER_FAULT");
  return parse_runner_fault(value != nullptr ? value : "");
}

FaultInjectingRunner::FaultInjectingRunner(std::unique_ptr<runner::ModelRunner> inner, RunnerFault fault)
    : ForwardingModelRunner(std::move(inner)), fault_(fault) {}

void FaultInjectingRunner::count(RunnerFault::Where where, int64_t& calls) {
  ++calls;
  if (fault_.where == where && calls >= fault_.call) {
    const char* call = where == RunnerFault::Where::kLaunch ? "launch" : "wait";
    throw Error(std::string("a runner fault injected by a test at ") + call + " " + std::to_string(fault_.call));
  }
}

void FaultInjectingRunner::launch(const core::StepPlan& plan) {
  count(RunnerFault::Where::kLaunch, launches_);
  ForwardingModelRunner::launch(plan);
}

core::StepOutput FaultInjectingRunner::wait() {
  count(RunnerFault::Where::kWait, waits_);
  return ForwardingModelRunner::wait();
}

std::unique_ptr<runner::ModelRunner> with_runner_fault(std::unique_ptr<runner::ModelRunner> runner, RunnerFault fault) {
  if (fault.where == RunnerFault::Where::kNone) return runner;
  return std::make_unique<FaultInjectingRunner>(std::move(runner), fault);
}

}  // namespace tachyon::engine
