// The n-gram drafter served end to end on the real tiny model and the CPU runner, built from
// EngineConfig::speculative as serve / generate build it: at several k and n ranges, on prompts
// that repeat themselves (so lookups hit) and on random ones, with greedy and seeded sampling,
// penalties, min_tokens, stop ids, n = 2 with logprobs and short max_tokens, every completion is
// token for token the plain run's (logprobs within 1e-4), never longer than max_tokens, and the
// repetitive prompts accept drafts and take fewer steps. Then the refusals at the engine.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "../tiny_model_suite.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/runner/cpu_model_runner.h"

namespace tachyon::engine::engine_ngram_test {

struct NgramRequest {
  std::vector<int32_t> prompt;
  core::SamplingParams params;
};

struct NgramCompletion {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

using Completions = std::vector<std::vector<NgramCompletion>>;  // [request][index]

core::EngineConfig engine_config(const core::SpeculativeConfig& speculative) {
  core::EngineConfig c;
  c.scheduler.max_num_batched_tokens = 32;  // long prompts are chunked, and drafts compete for the budget
  c.scheduler.max_model_len = 160;
  c.scheduler.eos_token_id = 3;
  c.num_blocks = 160;
  c.block_size = 4;
  c.speculative = speculative;
  return c;
}

// A random phrase of 3..8 tokens said 3..5 times, with a random token between some repeats.
std::vector<int32_t> repetitive_prompt(std::mt19937& rng) {
  std::vector<int32_t> phrase(3 + rng() % 6);
  for (auto& t : phrase) t = static_cast<int32_t>(4 + rng() % 500);
  std::vector<int32_t> prompt;
  const int repeats = 3 + static_cast<int>(rng() % 3);
  for (int r = 0; r < repeats; ++r) {
    prompt.insert(prompt.end(), phrase.begin(), phrase.end());
    if (rng() % 2) prompt.push_back(static_cast<int32_t>(4 + rng() % 500));
  }
  return prompt;
}

std::vector<int32_t> random_prompt(std::mt19937& rng) {
  std::vector<int32_t> prompt(1 + rng() % 30);
  for (auto& t : prompt) t = static_cast<int32_t>(rng() % 512);
  return prompt;
}

// Eight requests, one per kind of sampling; `repetitive` picks the prompts.
std::vector<NgramRequest> make_requests(uint32_t seed, bool repetitive) {
  std::mt19937 rng(seed);
  std::vector<NgramRequest> out;
  for (int i = 0; i < 8; ++i) {
    NgramRequest r;
    r.prompt = repetitive ? repetitive_prompt(rng) : random_prompt(rng);
    r.params.max_tokens = static_cast<int32_t>(6 + rng() % 40);
    switch (i) {
      case 0: r.params.temperature = 0.0f; break;
      case 1: r.params.temperature = 0.0f, r.params.ignore_eos = true, r.params.max_tokens = 1 + static_cast<int32_t>(rng() % 3); break;
      case 2: r.params.temperature = 0.9f, r.params.top_k = 20, r.params.top_p = 0.9f, r.params.seed = rng(); break;
      case 3:  // every penalty and min_tokens: the history they read grows with accepted drafts
        r.params.temperature = 1.1f, r.params.seed = rng(), r.params.repetition_penalty = 1.3f;
        r.params.frequency_penalty = 0.4f, r.params.presence_penalty = 0.3f, r.params.min_tokens = 3;
        break;
      case 4: r.params.temperature = 0.7f, r.params.seed = rng(), r.params.n = 2, r.params.logprobs = 2; break;
      case 5: r.params.temperature = 0.0f, r.params.logprobs = 0, r.params.min_tokens = 4; break;
      case 6: r.params.temperature = 0.0f, r.params.ignore_eos = true; break;  // stop ids set from the plain run
      case 7: r.params.temperature = 0.5f, r.params.seed = rng(), r.params.min_p = 0.05f; break;
    }
    out.push_back(r);
  }
  return out;
}

class EngineNgramTest : public testing::TinyModelSuite<23> {
 protected:
  static Completions run(const std::vector<NgramRequest>& requests, const core::SpeculativeConfig& speculative,
                         EngineStats* stats = nullptr) {
    const core::EngineConfig c = engine_config(speculative);
    EngineCore engine(c, std::make_unique<runner::CpuModelRunner>(*model_, c.num_blocks, c.block_size));
    std::vector<std::shared_ptr<OutputChannel>> channels;
    for (const NgramRequest& r : requests) {
      channels.push_back(std::make_shared<OutputChannel>());
      engine.submit(r.prompt, r.params, channels.back());
    }
    for (int guard = 0; engine.has_work() && guard < 100000; ++guard) engine.step();
    Completions out(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      out[i].resize(static_cast<size_t>(requests[i].params.n));
      while (auto delta = channels[i]->take(std::chrono::milliseconds(0))) {
        for (const auto& d : delta->completions) {
          NgramCompletion& completion = out[i][static_cast<size_t>(d.index)];
          completion.tokens.insert(completion.tokens.end(), d.token_ids.begin(), d.token_ids.end());
          for (const auto& l : d.logprobs) completion.logprobs.push_back(l.logprob);
        }
      }
    }
    if (stats != nullptr) *stats = engine.stats();
    return out;
  }

  // The stop-id request stops at a token its plain run generates (when it generates one).
  static void set_stop_ids(std::vector<NgramRequest>& requests) {
    const Completions plain = run(requests, {});
    const std::vector<int32_t>& tokens = plain[6][0].tokens;
    if (tokens.size() > 4) requests[6].params.stop_token_ids = {tokens[tokens.size() / 2]};
  }

  static void expect_same(const Completions& got, const Completions& plain, const std::vector<NgramRequest>& requests,
                          const std::string& what) {
    for (size_t r = 0; r < plain.size(); ++r) {
      for (size_t c = 0; c < plain[r].size(); ++c) {
        EXPECT_EQ(got[r][c].tokens, plain[r][c].tokens) << what << " request " << r << " completion " << c;
        EXPECT_LE(got[r][c].tokens.size(), static_cast<size_t>(requests[r].params.max_tokens)) << what << " request " << r;
        ASSERT_EQ(got[r][c].logprobs.size(), plain[r][c].logprobs.size()) << what << " request " << r;
        for (size_t t = 0; t < plain[r][c].logprobs.size(); ++t) {
          EXPECT_NEAR(got[r][c].logprobs[t], plain[r][c].logprobs[t], 1e-4) << what << " request " << r << " token " << t;
        }
      }
    }
  }
};

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
      std::vector<NgramRequest> requests = make_requests(seed, repetitive);
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

// Greedy requests on repetitive prompts, each alone in its engine (a batch takes as many steps
// as its longest member): the lookups hit, drafts are accepted, and the same tokens take fewer
// steps in all.
TEST_F(EngineNgramTest, RepetitivePromptsAcceptDraftsAndSaveSteps) {
  std::mt19937 rng(5);
  std::vector<NgramRequest> requests;
  for (int i = 0; i < 6; ++i) {
    NgramRequest r;
    r.prompt = repetitive_prompt(rng);
    r.params.temperature = 0.0f;
    r.params.ignore_eos = true;
    r.params.max_tokens = 48;
    requests.push_back(r);
  }
  std::vector<Completions> plain;
  int64_t plain_steps = 0;
  for (const NgramRequest& r : requests) {
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

// Rule 8 of the design: speculation over a runner that cannot verify drafts (the CUDA runners,
// for now) is refused when the engine is built, with the message the CLI shows.
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
  c.speculative.method = "mtp";
  EXPECT_NE(engine_error(c, std::make_unique<VerifyingRunner>()).find("not built yet"), std::string::npos);
}

}  // namespace tachyon::engine::engine_ngram_test
