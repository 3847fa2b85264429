// A runner that throws mid-run fails the engine, not the process: on the engine thread, every
// request (running, waiting in the scheduler, or still in the inbox) ends with an output whose
// error carries the runner's message, nothing hangs, the engine reports itself failed, its KV
// blocks are all free, and the failed state is final (a later submit, or a restart of the
// thread, is refused). For the synchronous loop and asynchronous scheduling, with the fault in
// launch() and, asynchronously, in the wait() that collects the step in flight. The runner is
// the CPU runner behind engine/runner_fault.h's FaultInjectingRunner.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>

#include "../model_test_util.h"
#include "../tiny_model_suite.h"
#include "tachyon/app/llm.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/engine/runner_fault.h"
#include "tachyon/runner/cpu_model_runner.h"

namespace tachyon::engine {
namespace {

// Calls `before_launch(n)` before the runner's nth launch (the fault fires inside it): a test
// submits from there, so that requests sit in the inbox when the step throws.
class LaunchHookRunner : public runner::ModelRunner {
 public:
  LaunchHookRunner(std::unique_ptr<runner::ModelRunner> inner, std::function<void(int64_t)> before_launch)
      : inner_(std::move(inner)), before_launch_(std::move(before_launch)) {}
  void launch(const core::StepPlan& plan) override {
    before_launch_(++launches_);
    inner_->launch(plan);
  }
  core::StepOutput wait() override { return inner_->wait(); }
  int64_t vocab_size() const override { return inner_->vocab_size(); }

 private:
  std::unique_ptr<runner::ModelRunner> inner_;
  std::function<void(int64_t)> before_launch_;
  int64_t launches_ = 0;
};

struct FailureCase {
  const char* name;
  const char* fault;  // TACHYON_RUNNER_FAULT's form
  core::AsyncScheduling async;
  int64_t hook_launch;   // the launch of the failing step: two requests are submitted before it
  std::string expected;  // in every error
};
void PrintTo(const FailureCase& c, std::ostream* os) { *os << c.name; }

class EngineFailureSuite : public testing::TinyModelSuite<7> {
 protected:
  static core::EngineConfig config(core::AsyncScheduling async) {
    core::EngineConfig c;
    c.scheduler.max_num_seqs = 2;  // of the first four requests, two wait in the scheduler
    c.scheduler.max_num_batched_tokens = 32;
    c.scheduler.max_model_len = 128;
    c.num_blocks = 64;
    c.block_size = 4;
    c.device.async_scheduling = async;
    return c;
  }
  static core::SamplingParams long_params() {
    core::SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = 64;  // far past the failing step
    p.ignore_eos = true;
    return p;
  }
};

class EngineFailureTest : public EngineFailureSuite, public ::testing::WithParamInterface<FailureCase> {};

// Takes the channel's outputs until the finished one (the deadline only guards against a hang).
RequestOutput final_output_of(OutputChannel& channel) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  RequestOutput last;
  while (!last.finished && std::chrono::steady_clock::now() < deadline) {
    if (auto out = channel.take(std::chrono::milliseconds(100))) last = std::move(*out);
  }
  return last;
}

TEST_P(EngineFailureTest, EveryRequestEndsWithTheRunnersErrorAndTheFailureIsFinal) {
  const FailureCase& c = GetParam();
  const core::EngineConfig cfg = config(c.async);
  // Requests 0-3 before the start (one with n = 3, whose siblings wait for its prompt); 4 and 5
  // from the engine thread just before the failing step's launch, so they are still in the inbox.
  const std::vector<int32_t> ns = {1, 3, 1, 1, 1, 2};
  std::vector<std::shared_ptr<OutputChannel>> channels;
  for (size_t i = 0; i < ns.size(); ++i) channels.push_back(std::make_shared<OutputChannel>());
  EngineCore* engine_ptr = nullptr;
  auto submit = [&](size_t i) {
    core::SamplingParams p = long_params();
    p.n = ns[i];
    engine_ptr->submit(testing::prompt_of(9 + 7 * static_cast<int>(i), static_cast<int>(i)), p, channels[i]);
  };
  bool hook_ran = false;
  auto faulty = with_runner_fault(std::make_unique<runner::CpuModelRunner>(*model_, cfg.num_blocks, cfg.block_size),
                                  parse_runner_fault(c.fault));
  auto hooked = std::make_unique<LaunchHookRunner>(std::move(faulty), [&](int64_t launch) {
    if (launch != c.hook_launch) return;
    hook_ran = true;
    submit(4);
    submit(5);
  });
  EngineCore engine(cfg, std::move(hooked));
  engine_ptr = &engine;
  EXPECT_EQ(engine.async_scheduling(), c.async == core::AsyncScheduling::kOn);
  for (size_t i = 0; i < 4; ++i) submit(i);
  engine.start();
  for (size_t i = 0; i < channels.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    const RequestOutput out = final_output_of(*channels[i]);
    ASSERT_TRUE(out.finished) << "the request never ended";
    EXPECT_NE(out.error.find("the engine failed: " + c.expected), std::string::npos) << out.error;
    ASSERT_EQ(out.completions.size(), static_cast<size_t>(ns[i]));
    for (const CompletionDelta& d : out.completions) {
      EXPECT_EQ(d.finish_reason, FinishReason::kAbort) << "completion " << d.index;
    }
  }
  EXPECT_TRUE(hook_ran);
  const std::optional<std::string> failure = engine.failure();
  ASSERT_TRUE(failure.has_value());
  EXPECT_NE(failure->find(c.expected), std::string::npos) << *failure;
  // The engine thread publishes its stats before it returns; stop() joins it.
  engine.stop();
  const EngineStats stats = engine.stats();
  EXPECT_TRUE(stats.failed);
  EXPECT_EQ(stats.num_active_requests, 0);
  EXPECT_EQ(stats.num_running + stats.num_waiting, 0);
  EXPECT_EQ(stats.num_live_sequences, 0);
  EXPECT_EQ(stats.kv_blocks_free, stats.kv_blocks_total) << "the failed requests' KV blocks were not given back";
  EXPECT_FALSE(engine.has_work());
  // Final: a new submit is refused, also after the engine thread is started again.
  auto late = std::make_shared<OutputChannel>();
  EXPECT_THROW(engine.submit(testing::prompt_of(5, 1), long_params(), late), EngineFailedError);
  engine.start();
  try {
    engine.submit(testing::prompt_of(5, 1), long_params(), late);
    ADD_FAILURE() << "a restarted failed engine took a request";
  } catch (const EngineFailedError& e) {
    EXPECT_NE(std::string(e.what()).find(c.expected), std::string::npos) << e.what();
  }
  EXPECT_TRUE(engine.failure().has_value());
  engine.stop();
}

INSTANTIATE_TEST_SUITE_P(
    Faults, EngineFailureTest,
    ::testing::Values(
        FailureCase{"SyncLaunch", "launch:3", core::AsyncScheduling::kOff, 3, "a runner fault injected by a test at launch 3"},
        FailureCase{"AsyncLaunch", "launch:3", core::AsyncScheduling::kOn, 3, "a runner fault injected by a test at launch 3"},
        // Asynchronously, step 4 launches behind step 3 and then collects it: its wait throws.
        FailureCase{"AsyncWait", "wait:3", core::AsyncScheduling::kOn, 4, "a runner fault injected by a test at wait 3"}),
    [](const ::testing::TestParamInfo<FailureCase>& info) { return info.param.name; });

// A caller that drives step() itself gets the runner's error from the failing step, and the
// engine is failed from then on: its requests have their error, step() does nothing.
TEST_F(EngineFailureSuite, CallerDrivenStepRethrowsAndFailsTheEngine) {
  const core::EngineConfig cfg = config(core::AsyncScheduling::kOff);
  EngineCore engine(cfg, with_runner_fault(std::make_unique<runner::CpuModelRunner>(*model_, cfg.num_blocks, cfg.block_size),
                                           parse_runner_fault("launch:2")));
  auto channel = std::make_shared<OutputChannel>();
  engine.submit(testing::prompt_of(9, 3), long_params(), channel);
  EXPECT_TRUE(engine.step());
  EXPECT_THROW(engine.step(), Error);
  ASSERT_TRUE(engine.failure().has_value());
  EXPECT_FALSE(engine.step());
  EXPECT_FALSE(engine.has_work());
  const RequestOutput out = final_output_of(*channel);
  EXPECT_TRUE(out.finished);
  EXPECT_NE(out.error.find("a runner fault injected by a test at launch 2"), std::string::npos) << out.error;
}

// The offline API: generate() throws the failure instead of returning aborted outputs, and so
// does every later call. The fault comes from TACHYON_RUNNER_FAULT, which app::load_runner reads.
TEST_F(EngineFailureSuite, OfflineGenerateThrowsTheFailure) {
  ::setenv("TACHYON_RUNNER_FAULT", "launch:2", 1);
  core::EngineConfig cfg = config(core::AsyncScheduling::kOff);
  cfg.device.kind = "cpu";
  app::LLM llm(*dir_, cfg);
  ::unsetenv("TACHYON_RUNNER_FAULT");
  try {
    llm.generate(std::vector<std::vector<int32_t>>{testing::prompt_of(9, 1), testing::prompt_of(12, 2)}, long_params());
    ADD_FAILURE() << "generate() returned from a failed engine";
  } catch (const EngineFailedError& e) {
    EXPECT_NE(std::string(e.what()).find("the engine failed: a runner fault injected by a test at launch 2"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(llm.generate(std::vector<std::vector<int32_t>>{testing::prompt_of(5, 3)}, long_params()), EngineFailedError);
}

TEST(RunnerFault, ParsesItsTwoFormsAndRefusesOthers) {
  EXPECT_EQ(parse_runner_fault("").where, RunnerFault::Where::kNone);
  const RunnerFault launch = parse_runner_fault("launch:3");
  EXPECT_EQ(launch.where, RunnerFault::Where::kLaunch);
  EXPECT_EQ(launch.call, 3);
  const RunnerFault wait = parse_runner_fault("wait:1");
  EXPECT_EQ(wait.where, RunnerFault::Where::kWait);
  EXPECT_EQ(wait.call, 1);
  for (const char* bad : {"launch", "launch:0", "wait:x", "wait:2x", "step:3", ":3"}) {
    EXPECT_THROW(parse_runner_fault(bad), Error) << bad;
  }
}

}  // namespace
}  // namespace tachyon::engine
