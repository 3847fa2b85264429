// Two-batch overlap (TBO, runner/tbo_rank_step.h) against the same ranks without it, through the
// engine, on CPU thread ranks with expert parallelism:
//   families  tiny Qwen3-MoE, DeepSeek-V3, DeepSeek-V3.2 (DSA) and GLM-5 at EP 2 and 4: eight
//             prompts of mixed lengths, chunked prefill (16-token budget), greedy: every step's
//             logits are bit-identical with and without TBO (a token's rows compute alone, and the
//             expert combine adds in expert order whichever micro-batch carries the token) and so
//             are the continuations; the happens-before check runs on every TBO step;
//   exact     the same, each TBO step's logits against the same ranks running the step's two
//             micro-batches one after the other without TBO: bit-identical (same rows per
//             call, same order of every sum), so the overlap changes no bit of what is computed;
//   fp8       FP8 weights and an FP8 KV cache (Qwen3-MoE, DeepSeek-V3 at EP 2): the same;
//   async     asynchronous scheduling with TBO against the synchronous run without it: the same;
//   many      tiny Qwen3-MoE over 40 prompts at EP 2: the same greedy continuations;
//   mutation  dropping one wait of micro-batch 1 fails the step with the checker's error;
//   refusals  every combination no test covers is refused at start-up, with the reason (the
//             canary is a dense Qwen3: TBO is refused for it);
//   factory   app::load_runner with enable_two_batch_overlap (what --tbo sets) builds the EP runner
//             with TBO on a model directory, whose greedy outputs are the run's without it, and
//             refuses the canary by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../engine_run.h"
#include "../tiny_families.h"
#include "tachyon/app/runner_factory.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/online_fp8.h"
#include "tachyon/runner/tbo_checks.h"
#include "tachyon/runner/tbo_split.h"
#include "tachyon/runner/tp_cpu_model_runner.h"

namespace tachyon::runner {
namespace {

constexpr double kLogitTolerance = 1e-5;  // max |diff| / max |logit|, f32 (as test_tp_families.cpp)

using Family = testing::TinyFamily;
constexpr Family kFamilies[] = {{"qwen3_moe", "tiny-moe"},
                                {"deepseek_v3", "tiny-deepseek"},
                                {"deepseek_v32", "tiny-dsa"},
                                {"glm_moe_dsa", "tiny-glm-dsa"}};

model::ModelWeights make_weights(const Family& f) { return testing::tiny_weights(f, 5); }

core::EngineConfig engine_config() {
  core::EngineConfig c;
  c.scheduler.max_num_batched_tokens = 16;  // prompts over 16 tokens are chunked
  c.scheduler.max_model_len = 128;
  c.num_blocks = 128;
  c.block_size = 4;
  return c;
}

// The runner under test, recording rank 0's logits of every step and how many steps had two or
// more sequences (the ones TBO splits).
class RecordingRunner : public ModelRunner {
 public:
  explicit RecordingRunner(std::unique_ptr<TpCpuModelRunner> inner) : inner_(std::move(inner)) {}
  void launch(const core::StepPlan& plan) override {
    inner_->launch(plan);  // synchronous: the step has run
    logits.push_back(inner_->rank_logits(0));
    if (plan.sequences.size() >= 2) ++split_steps;
  }
  core::StepOutput wait() override { return inner_->wait(); }
  int64_t vocab_size() const override { return inner_->vocab_size(); }

  std::vector<std::vector<float>> logits;
  int split_steps = 0;

 private:
  std::unique_ptr<TpCpuModelRunner> inner_;
};

struct Run {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> logits;
  int split_steps = 0;
};

Run run_engine(const model::ModelWeights& weights, int ranks, TboOptions tbo, int prompts, bool fp8_kv_cache = false,
               core::AsyncScheduling async = core::AsyncScheduling::kOff) {
  core::EngineConfig c = engine_config();
  c.device.async_scheduling = async;
  auto recording = std::make_unique<RecordingRunner>(std::make_unique<TpCpuModelRunner>(
      weights, ranks, c.num_blocks, c.block_size, true, fp8_kv_cache, model::DcpOptions{}, tbo));
  RecordingRunner* recorder = recording.get();
  engine::EngineCore engine(c, std::move(recording));
  core::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 6;
  params.ignore_eos = true;
  const int64_t vocab = weights.config.vocab_size;
  std::vector<std::shared_ptr<engine::OutputChannel>> channels;
  const int lengths[] = {3, 23, 9, 17, 1, 30, 5, 12};
  for (int p = 0; p < prompts; ++p) {
    const int length = lengths[p % 8] + p / 8;
    std::vector<int32_t> prompt;
    for (int i = 0; i < length; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + p * 101 + 11) % vocab));
    channels.push_back(std::make_shared<engine::OutputChannel>());
    engine.submit(prompt, params, channels.back());
  }
  Run run;
  run.tokens = testing::run_engine_to_idle(engine, channels, 10000);
  run.logits = std::move(recorder->logits);
  run.split_steps = recorder->split_steps;
  return run;
}

TboOptions tbo_on() {
  TboOptions tbo;
  tbo.enabled = true;
  tbo.check_order = true;
  return tbo;
}

// max |a - b| / max |b| over one step's logits.
double relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / scale;
}

double expect_equivalent(const Run& plain, const Run& overlapped) {
  EXPECT_EQ(overlapped.tokens, plain.tokens);
  for (const auto& tokens : plain.tokens) EXPECT_EQ(tokens.size(), 6u);
  EXPECT_GT(overlapped.split_steps, 3);
  EXPECT_EQ(overlapped.logits.size(), plain.logits.size());
  double worst = 0;
  for (size_t step = 0; step < std::min(plain.logits.size(), overlapped.logits.size()); ++step) {
    EXPECT_EQ(overlapped.logits[step].size(), plain.logits[step].size()) << "step " << step;
    if (overlapped.logits[step].size() != plain.logits[step].size()) continue;
    const double diff = relative_diff(overlapped.logits[step], plain.logits[step]);
    EXPECT_LE(diff, kLogitTolerance) << "step " << step;
    worst = std::max(worst, diff);
  }
  return worst;
}

TEST(TboFamilies, LogitsAndGreedyTokensMatchTheRunWithoutTbo) {
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.preset);
    const model::ModelWeights weights = make_weights(f);
    for (int ranks : {2, 4}) {
      SCOPED_TRACE("ep " + std::to_string(ranks));
      const double worst = expect_equivalent(run_engine(weights, ranks, {}, 8), run_engine(weights, ranks, tbo_on(), 8));
      std::printf("%s ep %d: max relative logit difference %.3g\n", f.preset, ranks, worst);
    }
  }
}

// Runs every step with TBO and, on a second runner of the same ranks without TBO, as its two
// micro-batches one after the other; counts the steps whose logits differ in any bit.
class ShadowRunner : public ModelRunner {
 public:
  ShadowRunner(std::unique_ptr<TpCpuModelRunner> tbo, std::unique_ptr<TpCpuModelRunner> plain)
      : tbo_(std::move(tbo)), plain_(std::move(plain)) {}
  void launch(const core::StepPlan& plan) override {
    tbo_->launch(plan);
    std::vector<float> expected;
    if (plan.sequences.size() >= 2) {
      ++split_steps;
      for (const core::StepPlan& part : split_micro_batches(plan)) {
        plain_->launch(part);
        plain_->wait();
        expected.insert(expected.end(), plain_->rank_logits(0).begin(), plain_->rank_logits(0).end());
      }
    } else {
      plain_->launch(plan);
      plain_->wait();
      expected = plain_->rank_logits(0);
    }
    const std::vector<float>& got = tbo_->rank_logits(0);
    if (got.size() != expected.size() || std::memcmp(got.data(), expected.data(), got.size() * sizeof(float)) != 0)
      ++differing_steps;
  }
  core::StepOutput wait() override { return tbo_->wait(); }
  int64_t vocab_size() const override { return tbo_->vocab_size(); }

  int split_steps = 0;
  int differing_steps = 0;

 private:
  std::unique_ptr<TpCpuModelRunner> tbo_, plain_;
};

TEST(TboFamilies, EachStepIsBitIdenticalToItsMicroBatchesRunOneAfterTheOther) {
  const core::EngineConfig c = engine_config();
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.preset);
    const model::ModelWeights weights = make_weights(f);
    for (int ranks : {2, 4}) {
      SCOPED_TRACE("ep " + std::to_string(ranks));
      auto make = [&](TboOptions tbo) {
        return std::make_unique<TpCpuModelRunner>(weights, ranks, c.num_blocks, c.block_size, true, false,
                                                  model::DcpOptions{}, tbo);
      };
      auto shadow = std::make_unique<ShadowRunner>(make(tbo_on()), make({}));
      ShadowRunner* runner = shadow.get();
      engine::EngineCore engine(c, std::move(shadow));
      core::SamplingParams params;
      params.temperature = 0.0f;
      params.max_tokens = 6;
      params.ignore_eos = true;
      std::vector<std::shared_ptr<engine::OutputChannel>> channels;
      for (int length : {3, 23, 9, 17, 1, 30, 5, 12}) {
        std::vector<int32_t> prompt;
        for (int i = 0; i < length; ++i) prompt.push_back(static_cast<int32_t>((i * 29 + length * 7 + 3) % 50));
        channels.push_back(std::make_shared<engine::OutputChannel>());
        engine.submit(prompt, params, channels.back());
      }
      testing::run_engine_to_idle(engine, channels, 10000);
      EXPECT_GT(runner->split_steps, 3);
      EXPECT_EQ(runner->differing_steps, 0);
    }
  }
}

// FP8 weights (online quantization's E4M3 round trip, as the CPU holds them) and an FP8 KV cache
// (both micro-batches write and read the rank's one cache): the same equivalence, and the FP8
// cache changes the logits (it is FP8).
TEST(TboFamilies, Fp8WeightsAndAnFp8KvCacheMatchTheRunWithoutTbo) {
  for (const Family& f : {kFamilies[0], kFamilies[1]}) {
    SCOPED_TRACE(f.preset);
    model::ModelWeights weights = make_weights(f);
    model::quantize_weights_fp8(weights);
    const runner::Run plain = run_engine(weights, 2, {}, 8, /*fp8_kv_cache=*/true);
    expect_equivalent(plain, run_engine(weights, 2, tbo_on(), 8, /*fp8_kv_cache=*/true));
    EXPECT_NE(run_engine(weights, 2, {}, 8).logits, plain.logits) << "the FP8 cache changed no logit (is it FP8?)";
  }
}

// Asynchronous scheduling (step n + 1 planned and launched before step n is applied; the ranks'
// runner resolves its deferred tokens): the TBO run's tokens and logits equal the synchronous run
// without TBO.
TEST(TboFamilies, AsynchronousSchedulingMatchesTheSynchronousRunWithoutTbo) {
  const model::ModelWeights weights = make_weights(kFamilies[1]);
  expect_equivalent(run_engine(weights, 2, {}, 8),
                    run_engine(weights, 2, tbo_on(), 8, /*fp8_kv_cache=*/false, core::AsyncScheduling::kOn));
}

TEST(TboFamilies, ManyPromptsOfATinyMoeGiveTheSameGreedyOutputs) {
  const model::ModelWeights weights = make_weights(kFamilies[0]);
  expect_equivalent(run_engine(weights, 2, {}, 40), run_engine(weights, 2, tbo_on(), 40));
}

TEST(TboFamilies, ADroppedWaitFailsTheStep) {
  const model::ModelWeights weights = make_weights(kFamilies[0]);
  TboOptions tbo = tbo_on();
  tbo.hooks.drop_wait_phase = 0;  // micro-batch 1 reads its embedding's all-reduce without waiting
  std::string error;
  try {
    run_engine(weights, 2, tbo, 4);
  } catch (const TboOrderError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("the happens-before check failed"), std::string::npos) << error;
  EXPECT_NE(error.find("micro-batch 1 phase 0"), std::string::npos) << error;
}

// ---------------------------------------------------------------------------------------------
// Refused at start-up.

std::string refusal(const model::ModelConfig& model, void (*change)(core::EngineConfig&)) {
  core::EngineConfig c;
  c.device.kind = "cpu";
  c.device.tensor_parallel_size = 2;
  c.device.enable_expert_parallel = true;
  c.device.enable_two_batch_overlap = true;
  change(c);
  return tbo_unsupported_reason(c, model);
}

TEST(TboFamilies, UntestedCombinationsAreRefusedWithTheReason) {
  const model::ModelConfig moe = model::make_model_config({.arch = "qwen3_moe", .preset = "tiny-moe"});
  const model::ModelConfig canary = model::ModelConfig::from_dir(TACHYON_TEST_DATA "/../../assets/canary");
  auto same = [](core::EngineConfig&) {};
  EXPECT_EQ(refusal(moe, same), "");
  EXPECT_NE(refusal(canary, same).find("has no mixture-of-experts layer"), std::string::npos) << refusal(canary, same);
  const std::pair<void (*)(core::EngineConfig&), const char*> cases[] = {
      {[](core::EngineConfig& c) { c.device.kind = "cuda"; }, "CPU thread ranks only"},
      {[](core::EngineConfig& c) { c.device.enable_expert_parallel = false; }, "needs expert parallelism"},
      {[](core::EngineConfig& c) { c.device.tensor_parallel_size = 1; }, "needs expert parallelism"},
      {[](core::EngineConfig& c) { c.device.data_parallel_size = 2; }, "with --dp 2"},
      {[](core::EngineConfig& c) { c.device.decode_context_parallel_size = 2; }, "with --dcp 2"},
      {[](core::EngineConfig& c) { c.device.nnodes = 2; }, "--nnodes"},
  };
  for (const auto& [change, reason] : cases) {
    const std::string why = refusal(moe, change);
    EXPECT_NE(why.find(reason), std::string::npos) << why;
    EXPECT_NE(why.find("not verified by any test") == std::string::npos && why.find("only") == std::string::npos &&
                      why.find("needs") == std::string::npos,
              true)
        << why;
  }
  // FP8 weights, an FP8 KV cache and asynchronous scheduling are verified (below).
  EXPECT_EQ(refusal(moe, [](core::EngineConfig& c) { c.device.async_scheduling = core::AsyncScheduling::kOn; }), "");
  EXPECT_EQ(refusal(moe, [](core::EngineConfig& c) { c.device.kv_cache_dtype = DType::kF8E4M3; }), "");
  EXPECT_EQ(refusal(moe, [](core::EngineConfig& c) { c.device.quantization = "fp8"; }), "");
  // Speculative decoding over TBO is verified (tests/unit/test_engine_mtp.cpp, test_engine_draft_model.cpp).
  EXPECT_EQ(refusal(moe, [](core::EngineConfig& c) { c.speculative.method = "ngram"; }), "");
  EXPECT_EQ(refusal(moe, [](core::EngineConfig& c) { c.speculative.method = "draft"; }), "");
  EXPECT_EQ(refusal(moe, [](core::EngineConfig& c) { c.speculative.method = "mtp"; }), "");
  // Off: nothing to refuse.
  EXPECT_EQ(refusal(canary, [](core::EngineConfig& c) { c.device.enable_two_batch_overlap = false; }), "");
}

TEST(TboFamilies, TheRunnerRefusesTboWithoutExpertParallelism) {
  const model::ModelWeights weights = make_weights(kFamilies[0]);
  EXPECT_THROW(TpCpuModelRunner(weights, 2, 16, 4, false, false, {}, tbo_on()), Error);
}

}  // namespace
}  // namespace tachyon::runner

namespace tachyon::runner {
namespace {

std::vector<std::vector<int32_t>> generate_through_factory(const std::filesystem::path& dir, bool tbo) {
  core::EngineConfig c = engine_config();
  c.device.kind = "cpu";
  c.device.tensor_parallel_size = 2;
  c.device.enable_expert_parallel = true;
  c.device.enable_two_batch_overlap = tbo;
  app::LoadedRunner loaded = app::load_runner(dir, c);
  const auto* tp = dynamic_cast<const TpCpuModelRunner*>(loaded.runner.get());
  EXPECT_TRUE(tp != nullptr && tp->two_batch_overlap() == tbo);
  engine::EngineCore engine(c, std::move(loaded.runner));
  core::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 5;
  params.ignore_eos = true;
  std::vector<std::shared_ptr<engine::OutputChannel>> channels;
  for (int length : {7, 19, 2, 11}) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < length; ++i) prompt.push_back(static_cast<int32_t>((i * 13 + length) % 50));
    channels.push_back(std::make_shared<engine::OutputChannel>());
    engine.submit(prompt, params, channels.back());
  }
  return testing::run_engine_to_idle(engine, channels, 10000);
}

TEST(TboFamilies, TheRunnerFactoryBuildsTboFromTheConfigAndRefusesTheCanary) {
  const auto dir = std::filesystem::temp_directory_path() / ("tachyon-tbo-factory-" + std::to_string(::getpid()));
  model::make_model({.arch = "qwen3_moe", .preset = "tiny-moe", .seed = 5, .out_dir = dir});
  const auto plain = generate_through_factory(dir, false);
  EXPECT_EQ(generate_through_factory(dir, true), plain);
  std::filesystem::remove_all(dir);

  core::EngineConfig c = engine_config();
  c.device.kind = "cpu";
  c.device.tensor_parallel_size = 2;
  c.device.enable_expert_parallel = true;
  c.device.enable_two_batch_overlap = true;
  std::string error;
  try {
    app::load_runner(TACHYON_TEST_DATA "/../../assets/canary", c);
  } catch (const Error& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("--enable-two-batch-overlap: Qwen3ForCausalLM has no mixture-of-experts layer"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace tachyon::runner
