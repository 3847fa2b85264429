// A rank of a CPU-thread-rank runner that fails outside a collective, mid-run, through the
// engine: the step throws that rank's error on the engine thread, instead of the other ranks
// waiting in their next collective for ever (the ctest timeout is the guard: these tests make no
// time assertion). For data-parallel attention (DP 2, DP 2 x TP 2; the failing rank's peers wait
// in the MoE layers' expert-parallel exchange), tensor parallelism with and without expert
// parallelism and with decode context parallelism, and prefill context parallelism (a split
// prefill step). The failure is injected by the runners' test hook (RankWorkers).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "../model_test_util.h"
#include "../tiny_families.h"
#include "tachyon/base/check.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/runner/dp_cpu_model_runner.h"
#include "tachyon/runner/pcp_cpu_model_runner.h"
#include "tachyon/runner/tp_cpu_model_runner.h"

namespace tachyon::runner {
namespace {

core::EngineConfig failure_engine_config() {
  core::EngineConfig c;
  c.scheduler.max_num_batched_tokens = 16;
  c.scheduler.max_model_len = 64;
  c.num_blocks = 32;
  c.block_size = 4;
  return c;
}

// Runs one good step, then injects a failure of global rank `rank` into the next one (`fail`
// calls the runner's hook) and expects that step to throw the injected error.
void expect_the_failing_step_throws(std::unique_ptr<ModelRunner> runner, const std::function<void()>& fail,
                                    int rank) {
  engine::EngineCore engine(failure_engine_config(), std::move(runner));
  core::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 8;
  params.ignore_eos = true;
  std::vector<std::shared_ptr<engine::OutputChannel>> channels;
  for (int length : {20, 9, 13}) {  // the 20-token prompt takes two prefill steps
    channels.push_back(std::make_shared<engine::OutputChannel>());
    engine.submit(testing::prompt_of(length, length), params, channels.back());
  }
  engine.step();
  fail();
  try {
    engine.step();
    ADD_FAILURE() << "the step with a failed rank returned normally";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank " + std::to_string(rank) + ": a failure injected by a test"), std::string::npos) << what;
  }
}

model::ModelWeights deepseek() { return testing::tiny_weights(testing::kLatentFamilies[0], 5); }

TEST(RankFailure, DataParallelStepThrowsTheFailedRanksError) {
  const model::ModelWeights weights = deepseek();
  const core::EngineConfig c = failure_engine_config();
  for (auto [dp, tp, rank] : {std::tuple{2, 1, 1}, std::tuple{2, 2, 2}, std::tuple{2, 2, 1}}) {
    SCOPED_TRACE("dp " + std::to_string(dp) + " x tp " + std::to_string(tp) + ", rank " + std::to_string(rank));
    auto runner = std::make_unique<DpCpuModelRunner>(weights, dp, tp, c.num_blocks, c.block_size);
    DpCpuModelRunner* hook = runner.get();
    expect_the_failing_step_throws(std::move(runner), [&] { hook->fail_next_step_for_test(rank); }, rank);
  }
}

TEST(RankFailure, TensorParallelStepThrowsTheFailedRanksError) {
  const model::ModelWeights weights = deepseek();
  const core::EngineConfig c = failure_engine_config();
  struct Case {
    bool expert_parallel;
    int dcp;
  };
  for (const Case& k : {Case{false, 1}, Case{true, 1}, Case{false, 2}}) {
    SCOPED_TRACE("ep " + std::to_string(k.expert_parallel) + " dcp " + std::to_string(k.dcp));
    auto runner = std::make_unique<TpCpuModelRunner>(weights, 2, c.num_blocks, c.block_size, k.expert_parallel, false,
                                                     model::DcpOptions{k.dcp, 1});
    TpCpuModelRunner* hook = runner.get();
    expect_the_failing_step_throws(std::move(runner), [&] { hook->fail_next_step_for_test(1); }, 1);
  }
}

TEST(RankFailure, PrefillContextParallelStepThrowsTheFailedRanksError) {
  const model::ModelWeights weights = deepseek();
  const core::EngineConfig c = failure_engine_config();
  for (int tp : {1, 2}) {
    SCOPED_TRACE("pcp 2 x tp " + std::to_string(tp));
    auto runner = std::make_unique<PcpCpuModelRunner>(weights, 2, c.num_blocks, c.block_size, tp);
    PcpCpuModelRunner* hook = runner.get();
    expect_the_failing_step_throws(std::move(runner), [&] { hook->fail_next_step_for_test(tp); }, tp);
  }
}

}  // namespace
}  // namespace tachyon::runner
