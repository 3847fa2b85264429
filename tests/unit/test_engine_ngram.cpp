// The n-gram drafter served end to end on the real tiny model and the CPU runner, built from
// EngineConfig::speculative as serve / generate build it: at several k and n ranges, on prompts
// that repeat themselves (so lookups hit) and on random ones, with greedy and seeded sampling,
// penalties, min_tokens, stop ids, n = 2 with logprobs and short max_tokens, every completion is
// token for token the plain run's (logprobs bit for bit), never longer than max_tokens, and the
// repetitive prompts accept drafts and take fewer steps. Then the refusals at the engine.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "speculative_engine_suite.h"

namespace tachyon::engine::engine_ngram_test {

using namespace speculative_test;  // NOLINT: the suite's vocabulary

using EngineNgramTest = SpeculativeEngineSuite<23>;

const core::SpeculativeConfig kConfigs[] = {
    {.method = "ngram", .num_speculative_tokens = 1, .ngram_min = 1, .ngram_max = 1},
    {.method = "ngram", .num_speculative_tokens = 3, .ngram_min = 1, .ngram_max = 4},
    {.method = "ngram", .num_speculative_tokens = 5, .ngram_min = 2, .ngram_max = 3},
    {.method = "ngram", .num_speculative_tokens = 8},  // n-gram sizes as vLLM's default: 5 and 5
    {.method = "ngram", .num_speculative_tokens = 16, .ngram_min = 1, .ngram_max = 2},
};

std::string describe(const core::SpeculativeConfig& s) {
  const core::SpeculativeConfig r = resolve_speculative_config(s);
  return "k " + std::to_string(r.num_speculative_tokens) + " n " + std::to_string(r.ngram_min) + ".." +
         std::to_string(r.ngram_max);
}

TEST_F(EngineNgramTest, NgramDraftsNeverChangeTheTokens) {
  for (bool repetitive : {true, false}) {
    int64_t accepted = 0;
    for (uint32_t seed = 1; seed <= 6; ++seed) {
      std::vector<SpecRequest> requests = make_requests(seed, repetitive);
      set_stop_ids(requests);
      EngineStats plain_stats;
      const Completions plain = run(requests, {}, &plain_stats);
      EXPECT_EQ(plain_stats.draft_tokens, 0);
      for (const core::SpeculativeConfig& speculative : kConfigs) {
        EngineStats stats;
        const Completions got = run(requests, speculative, &stats);
        const std::string what = std::string(repetitive ? "repetitive" : "random") + " seed " + std::to_string(seed) +
                                 " " + describe(speculative);
        expect_same(got, plain, requests, what);
        EXPECT_EQ(stats.generated_tokens, plain_stats.generated_tokens) << what;
        EXPECT_LE(stats.draft_tokens_accepted, stats.draft_tokens) << what;
        EXPECT_EQ(stats.num_speculative_tokens, speculative.num_speculative_tokens) << what;
        int64_t per_position = 0;
        for (int64_t n : stats.draft_tokens_accepted_per_position) per_position += n;
        EXPECT_EQ(per_position, stats.draft_tokens_accepted) << what;
        for (int32_t i = speculative.num_speculative_tokens; i < core::kMaxSpeculativeTokens; ++i) {
          EXPECT_EQ(stats.draft_tokens_accepted_per_position[static_cast<size_t>(i)], 0) << what << " position " << i;
        }
        accepted += stats.draft_tokens_accepted;
      }
    }
    if (repetitive) {
      EXPECT_GT(accepted, 50);
    }
  }
}

// With the FP8 KV cache (--kv-cache-dtype fp8) drafts still change no token: a row's factors are its
// own (per token and KV head), so a verify step writes the rows a plain step would, up to the f32
// rounding of a batch of other rows; rejected rows are overwritten later like any. That rounding
// can move a value across an E4M3 rounding boundary, so logprobs are held to 1e-3 (measured:
// 1.9e-4 at worst), tokens exactly. The FP8 run differs from the bf16 one (the cache is FP8).
TEST_F(EngineNgramTest, NgramDraftsOverAnFp8KvCacheNeverChangeTheTokens) {
  int64_t accepted = 0;
  bool differs_from_bf16 = false;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    std::vector<SpecRequest> requests = make_requests(seed, /*repetitive=*/true);
    core::EngineConfig config = engine_config({});
    config.device.kv_cache_dtype = DType::kF8E4M3;
    const Completions plain = run_with(requests, config);
    const Completions bf16 = run(requests, {});
    for (size_t r = 0; r < plain.size(); ++r) differs_from_bf16 = differs_from_bf16 || plain[r][0].tokens != bf16[r][0].tokens;
    for (const core::SpeculativeConfig& speculative : {kConfigs[1], kConfigs[2]}) {
      config.speculative = speculative;
      EngineStats stats;
      const Completions got = run_with(requests, config, &stats);
      expect_same(got, plain, requests, "fp8 kv seed " + std::to_string(seed) + " " + describe(speculative), 1e-3);
      accepted += stats.draft_tokens_accepted;
    }
  }
  EXPECT_GT(accepted, 20);
  EXPECT_TRUE(differs_from_bf16) << "the FP8 cache changed no token (is it FP8?)";
}

// Greedy requests on repetitive prompts, each alone in its engine (a batch takes as many steps
// as its longest member): the lookups hit, drafts are accepted, and the same tokens take fewer
// steps in all.
TEST_F(EngineNgramTest, RepetitivePromptsAcceptDraftsAndSaveSteps) {
  std::mt19937 rng(5);
  std::vector<SpecRequest> requests;
  for (int i = 0; i < 6; ++i) {
    SpecRequest r;
    r.prompt = repetitive_prompt(rng);
    r.params.temperature = 0.0f;
    r.params.ignore_eos = true;
    r.params.max_tokens = 48;
    requests.push_back(r);
  }
  std::vector<Completions> plain;
  int64_t plain_steps = 0;
  for (const SpecRequest& r : requests) {
    EngineStats stats;
    plain.push_back(run({r}, {}, &stats));
    plain_steps += stats.steps;
  }
  for (const core::SpeculativeConfig& speculative : kConfigs) {
    int64_t steps = 0, accepted = 0, drafts = 0;
    for (size_t i = 0; i < requests.size(); ++i) {
      EngineStats stats;
      expect_same(run({requests[i]}, speculative, &stats), plain[i], {requests[i]}, describe(speculative));
      EXPECT_EQ(stats.generated_tokens, 48) << describe(speculative);
      steps += stats.steps;
      accepted += stats.draft_tokens_accepted;
      drafts += stats.num_drafts;
    }
    EXPECT_GT(accepted, 0) << describe(speculative);
    EXPECT_GT(drafts, 0) << describe(speculative);
    EXPECT_LT(steps, plain_steps) << describe(speculative);
    std::printf("%s: %lld steps (plain %lld), %lld drafts, %lld accepted\n", describe(speculative).c_str(),
                static_cast<long long>(steps), static_cast<long long>(plain_steps), static_cast<long long>(drafts),
                static_cast<long long>(accepted));
  }
}

struct UnverifyingRunner : runner::ModelRunner {
  void launch(const core::StepPlan&) override {}
  core::StepOutput wait() override { return {}; }
  int64_t vocab_size() const override { return 16; }
};

std::string engine_error(const core::EngineConfig& c, std::unique_ptr<runner::ModelRunner> runner) {
  try {
    EngineCore engine(c, std::move(runner));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Rule 8 of the design: speculation over a runner that cannot verify drafts (the tensor-parallel
// CUDA one) is refused when the engine is built, with the message the CLI shows.
TEST(EngineNgramRefusal, ConfiguredSpeculationIsRefusedWhereItCannotBeVerified) {
  core::EngineConfig c = engine_config({.method = "ngram", .num_speculative_tokens = 3});
  EXPECT_NE(engine_error(c, std::make_unique<UnverifyingRunner>()).find(kDraftsNeedVerifyingRunner), std::string::npos);
  c.speculative = {};
  EXPECT_EQ(engine_error(c, std::make_unique<UnverifyingRunner>()), "");
  // Asynchronous scheduling forced on: drafts are proposed from known tokens, so it refuses.
  c = engine_config({.method = "ngram", .num_speculative_tokens = 3});
  c.device.async_scheduling = core::AsyncScheduling::kOn;
  struct VerifyingRunner : UnverifyingRunner {
    bool verifies_drafts() const override { return true; }
  };
  EXPECT_NE(engine_error(c, std::make_unique<VerifyingRunner>()).find("--async-scheduling auto or off"), std::string::npos);
  c.device.async_scheduling = core::AsyncScheduling::kAuto;
  EXPECT_EQ(engine_error(c, std::make_unique<VerifyingRunner>()), "");
  // MTP modules come with the model (app::load_runner builds the MtpDrafter): an engine asked for
  // them without one is refused.
  c.speculative.method = "mtp";
  EXPECT_NE(engine_error(c, std::make_unique<VerifyingRunner>()).find("a mtp drafter needs its model"),
            std::string::npos);
}

}  // namespace tachyon::engine::engine_ngram_test
