// EngineCore with a drafter on the tiny model and the CPU runner: whatever the drafts are (the
// plain run's own continuation, corrupted at random), a run with drafts gives token for token
// what the plain run gives, for greedy and seeded sampling, with penalties, min_tokens, EOS,
// logprobs and n > 1 in one batch. A runner that accepted drafts it should reject, or a
// scheduler that kept rejected K/V, would change the tokens.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <random>

#include "../tiny_model_suite.h"
#include "../engine_run.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/runner/cpu_model_runner.h"

namespace tachyon::engine {
namespace {

struct Request {
  std::vector<int32_t> prompt;
  core::SamplingParams params;
};

struct Completion {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

// Proposes the plain run's continuation of whichever request's prompt starts the sequence, each
// token replaced by a random one with probability 1 - quality.
class OracleDrafter : public Drafter {
 public:
  OracleDrafter(const std::vector<Request>& requests, const std::vector<std::vector<Completion>>& plain, double quality,
                uint32_t seed)
      : requests_(requests), plain_(plain), quality_(quality), rng_(seed) {}

  std::vector<int32_t> propose(int64_t, std::span<const int32_t> tokens) override {
    std::vector<int32_t> drafts;
    const int k = std::uniform_int_distribution<int>(0, 4)(rng_);
    for (size_t r = 0; r < requests_.size(); ++r) {
      const auto& prompt = requests_[r].prompt;
      if (tokens.size() < prompt.size() || !std::equal(prompt.begin(), prompt.end(), tokens.begin())) continue;
      // Any completion of the request whose outputs so far match (n > 1 siblings differ).
      for (const Completion& c : plain_[r]) {
        const size_t done = tokens.size() - prompt.size();
        if (done > c.tokens.size() || !std::equal(c.tokens.begin(), c.tokens.begin() + static_cast<long>(done),
                                                  tokens.begin() + static_cast<long>(prompt.size()))) {
          continue;
        }
        for (size_t i = done; i < c.tokens.size() && drafts.size() < static_cast<size_t>(k); ++i) {
          const bool corrupt = std::uniform_real_distribution<double>(0, 1)(rng_) > quality_;
          drafts.push_back(corrupt ? static_cast<int32_t>(rng_() % 512) : c.tokens[i]);
        }
        return drafts;
      }
    }
    for (int i = 0; i < k; ++i) drafts.push_back(static_cast<int32_t>(rng_() % 512));
    return drafts;
  }

 private:
  const std::vector<Request>& requests_;
  const std::vector<std::vector<Completion>>& plain_;
  double quality_;
  std::mt19937 rng_;
};

class EngineDraftsTest : public testing::TinyModelSuite<11> {
 protected:
  // Every request's completions (by index), each with its tokens and logprobs.
  static std::vector<std::vector<Completion>> run(const std::vector<Request>& requests, std::unique_ptr<Drafter> drafter,
                                                  EngineStats* stats = nullptr) {
    core::EngineConfig c;
    c.scheduler.max_num_batched_tokens = 24;  // long prompts are chunked
    c.scheduler.max_model_len = 128;
    c.scheduler.eos_token_id = 3;
    c.num_blocks = 96;
    c.block_size = 4;
    EngineCore engine(c, std::make_unique<runner::CpuModelRunner>(*model_, c.num_blocks, c.block_size));
    engine.set_drafter(std::move(drafter));
    std::vector<std::shared_ptr<OutputChannel>> channels;
    for (const Request& r : requests) {
      channels.push_back(std::make_shared<OutputChannel>());
      engine.submit(r.prompt, r.params, channels.back());
    }
    for (int guard = 0; engine.has_work() && guard < 100000; ++guard) engine.step();
    std::vector<std::vector<Completion>> out(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      out[i].resize(static_cast<size_t>(requests[i].params.n));
      while (auto delta = channels[i]->take(std::chrono::milliseconds(0))) {
        for (const auto& d : delta->completions) {
          Completion& completion = out[i][static_cast<size_t>(d.index)];
          completion.tokens.insert(completion.tokens.end(), d.token_ids.begin(), d.token_ids.end());
          for (const auto& l : d.logprobs) completion.logprobs.push_back(l.logprob);
        }
      }
    }
    if (stats != nullptr) *stats = engine.stats();
    return out;
  }

  static std::vector<Request> requests(uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<Request> out;
    for (int i = 0; i < 7; ++i) {
      Request r;
      r.prompt.resize(static_cast<size_t>(1 + rng() % 30));
      for (auto& t : r.prompt) t = static_cast<int32_t>(rng() % 512);
      r.params.max_tokens = static_cast<int32_t>(4 + rng() % 28);
      switch (i % 4) {
        case 0: r.params.temperature = 0.0f; break;  // greedy
        case 1:                                       // seeded, filtered
          r.params.temperature = 0.9f, r.params.top_k = 20, r.params.top_p = 0.9f, r.params.seed = rng();
          break;
        case 2:  // seeded with every penalty and min_tokens (the history grows with accepted drafts)
          r.params.temperature = 1.1f, r.params.seed = rng(), r.params.repetition_penalty = 1.3f;
          r.params.frequency_penalty = 0.4f, r.params.presence_penalty = 0.3f, r.params.min_tokens = 3;
          break;
        case 3:  // n > 1 siblings from one prompt, with logprobs
          r.params.temperature = 0.7f, r.params.seed = rng(), r.params.n = 2, r.params.logprobs = 2;
          break;
      }
      out.push_back(r);
    }
    return out;
  }

};

TEST_F(EngineDraftsTest, DraftsNeverChangeTheTokens) {
  int64_t accepted = 0, drafted = 0;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    const std::vector<Request> reqs = requests(seed);
    const auto plain = run(reqs, nullptr);
    for (double quality : {0.0, 0.6, 1.0}) {
      EngineStats stats;
      const auto drafted_run = run(reqs, std::make_unique<OracleDrafter>(reqs, plain, quality, seed * 7), &stats);
      for (size_t r = 0; r < reqs.size(); ++r) {
        for (size_t c = 0; c < plain[r].size(); ++c) {
          EXPECT_EQ(drafted_run[r][c].tokens, plain[r][c].tokens)
              << "seed " << seed << " quality " << quality << " request " << r << " completion " << c;
          ASSERT_EQ(drafted_run[r][c].logprobs.size(), plain[r][c].logprobs.size());
          for (size_t t = 0; t < plain[r][c].logprobs.size(); ++t) {
            EXPECT_NEAR(drafted_run[r][c].logprobs[t], plain[r][c].logprobs[t], 1e-4);
          }
        }
      }
      if (quality == 1.0) {
        EXPECT_GT(stats.draft_tokens_accepted, 0);
      }
      if (quality == 0.0) {
        EXPECT_LT(stats.draft_tokens_accepted, stats.draft_tokens);
      }
      accepted += stats.draft_tokens_accepted;
      drafted += stats.draft_tokens;
    }
  }
  EXPECT_GT(accepted, 100);
  EXPECT_GT(drafted, accepted);
}

// A good drafter takes steps away: fewer steps for the same tokens.
TEST_F(EngineDraftsTest, AcceptedDraftsSaveSteps) {
  const std::vector<Request> reqs = requests(9);
  EngineStats plain_stats, drafted_stats;
  const auto plain = run(reqs, nullptr, &plain_stats);
  run(reqs, std::make_unique<OracleDrafter>(reqs, plain, 1.0, 5), &drafted_stats);
  EXPECT_EQ(drafted_stats.generated_tokens, plain_stats.generated_tokens);
  EXPECT_LT(drafted_stats.steps, plain_stats.steps);
}

// Rule 8 of the design: a runner that cannot verify drafts (the tensor-parallel CUDA one) refuses a
// drafter at start-up instead of failing at the first step.
TEST(EngineDraftsRefusal, ARunnerThatCannotVerifyDraftsRefusesADrafter) {
  struct PlainRunner : runner::ModelRunner {
    void launch(const core::StepPlan&) override {}
    core::StepOutput wait() override { return {}; }
    int64_t vocab_size() const override { return 16; }
  };
  struct AnyDrafter : Drafter {
    std::vector<int32_t> propose(int64_t, std::span<const int32_t>) override { return {1}; }
  };
  core::EngineConfig c;
  c.num_blocks = 64;
  c.block_size = 4;
  c.scheduler.max_model_len = 64;
  EngineCore engine(c, std::make_unique<PlainRunner>());
  EXPECT_THROW(engine.set_drafter(std::make_unique<AnyDrafter>()), Error);
  EXPECT_NO_THROW(engine.set_drafter(nullptr));
}

}  // namespace
}  // namespace tachyon::engine
