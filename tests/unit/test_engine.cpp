// EngineCore on the tiny model with the paged CPU runner: batch invariance against the
// single-sequence reference forward (alone, in a busy batch, with chunked prefill, with
// preemption, with a prefix-cache hit), prefix-cache savings, aborts of every kind, consumers
// that go away or lag, seeded sampling, n > 1, the queue bound and validation at the door.
#include "../engine_run.h"
#include "tachyon/engine/engine_core.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <random>
#include <thread>

#include "tachyon/model/make_model.h"
#include "tachyon/runner/cpu_model_runner.h"

namespace tachyon::engine {
using namespace tachyon::core;
namespace {

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("tachyon-engine-" + std::to_string(::getpid())));
    model::make_model({.arch = "qwen3", .preset = "tiny", .seed = 11, .out_dir = *dir_});
    model_ = new model::DenseModel(model::DenseModel::load(*dir_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete model_;
    delete dir_;
  }

  static EngineConfig config(int64_t budget = 256, int32_t num_blocks = 256, int32_t block_size = 4) {
    EngineConfig c;
    c.scheduler.max_num_batched_tokens = budget;
    c.scheduler.max_model_len = 256;
    c.num_blocks = num_blocks;
    c.block_size = block_size;
    return c;
  }
  static std::unique_ptr<EngineCore> engine(const EngineConfig& c) {
    return std::make_unique<EngineCore>(c, std::make_unique<runner::CpuModelRunner>(*model_, c.num_blocks, c.block_size));
  }
  static std::vector<int32_t> random_prompt(std::mt19937& rng, int length) {
    std::vector<int32_t> p(static_cast<size_t>(length));
    for (auto& t : p) t = static_cast<int32_t>(rng() % 512);
    return p;
  }
  static SamplingParams greedy(int max_tokens) {
    SamplingParams p;
    p.temperature = 0.0f;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    return p;
  }
  // Drives the engine on this thread until idle; returns each channel's tokens (completion 0).
  static std::vector<std::vector<int32_t>> run_all(EngineCore& e, std::vector<std::shared_ptr<OutputChannel>>& channels) {
    return testing::run_engine_to_idle(e, channels);
  }

  static std::filesystem::path* dir_;
  static model::DenseModel* model_;
};
std::filesystem::path* EngineTest::dir_ = nullptr;
model::DenseModel* EngineTest::model_ = nullptr;

// The request under test and its reference continuation from the contiguous forward.
struct Probe {
  std::vector<int32_t> prompt;
  std::vector<int32_t> expected;
};

Probe make_probe(const model::DenseModel& model, int prompt_len, int max_tokens, uint32_t seed) {
  std::mt19937 rng(seed);
  Probe probe;
  for (int i = 0; i < prompt_len; ++i) probe.prompt.push_back(static_cast<int32_t>(rng() % 512));
  probe.expected = model::greedy_generate(model, probe.prompt, max_tokens);
  return probe;
}

TEST_F(EngineTest, GreedyIsBatchInvariant) {
  const Probe probe = make_probe(*model_, 23, 24, 1);
  struct Case {
    const char* name;
    EngineConfig config;
    int busy;           // other requests in the batch
    bool warm_prefix;   // a request with the same prompt prefix finished before
  };
  const Case cases[] = {
      {"alone", config(), 0, false},
      {"busy batch", config(), 24, false},
      {"chunked prefill", config(/*budget=*/5), 6, false},
      {"preemption", config(/*budget=*/256, /*num_blocks=*/64, /*block_size=*/4), 12, false},
      {"prefix hit", config(), 4, true},
  };
  for (const Case& c : cases) {
    auto e = engine(c.config);
    std::mt19937 rng(7);
    std::vector<std::shared_ptr<OutputChannel>> channels;
    if (c.warm_prefix) {
      std::vector<int32_t> prefix(probe.prompt.begin(), probe.prompt.begin() + 20);
      auto ch = std::make_shared<OutputChannel>();
      e->submit(prefix, greedy(2), ch);
      std::vector<std::shared_ptr<OutputChannel>> warm{ch};
      run_all(*e, warm);
    }
    channels.push_back(std::make_shared<OutputChannel>());
    e->submit(probe.prompt, greedy(24), channels[0]);
    for (int i = 0; i < c.busy; ++i) {
      SamplingParams p;
      p.temperature = 0.8f;
      p.seed = static_cast<uint64_t>(i);
      p.max_tokens = 10 + static_cast<int>(rng() % 30);
      channels.push_back(std::make_shared<OutputChannel>());
      e->submit(random_prompt(rng, 5 + static_cast<int>(rng() % 40)), p, channels.back());
    }
    auto outputs = run_all(*e, channels);
    EXPECT_EQ(outputs[0], probe.expected) << c.name;
    EngineStats stats = e->stats();
    if (std::string(c.name) == "preemption") {
      EXPECT_GT(stats.preemptions, 0) << "the case must really preempt";
    }
    if (c.warm_prefix) {
      EXPECT_GE(stats.kv.prefix_hit_tokens, 20 / 4 * 4) << "the case must really hit the cache";
    }
    EXPECT_EQ(stats.kv_blocks_free, stats.kv_blocks_total) << c.name;
  }
}

TEST_F(EngineTest, SeededSamplingIsBatchInvariant) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.9f;
  p.seed = 1234;
  p.max_tokens = 20;
  p.ignore_eos = true;
  std::mt19937 rng(3);
  const std::vector<int32_t> prompt = random_prompt(rng, 17);
  std::vector<std::vector<int32_t>> runs;
  for (int busy : {0, 16}) {
    auto e = engine(config(/*budget=*/16));
    std::vector<std::shared_ptr<OutputChannel>> channels{std::make_shared<OutputChannel>()};
    e->submit(prompt, p, channels[0]);
    for (int i = 0; i < busy; ++i) {
      channels.push_back(std::make_shared<OutputChannel>());
      e->submit(random_prompt(rng, 9), p, channels.back());
    }
    runs.push_back(run_all(*e, channels)[0]);
  }
  EXPECT_EQ(runs[0].size(), 20u);
  EXPECT_EQ(runs[0], runs[1]);
}

TEST_F(EngineTest, PrefixHitComputesOnlyTheNewTokens) {
  auto e = engine(config());
  std::mt19937 rng(5);
  std::vector<int32_t> shared = random_prompt(rng, 32);
  std::vector<int32_t> longer = shared;
  for (int i = 0; i < 6; ++i) longer.push_back(static_cast<int32_t>(rng() % 512));
  std::vector<std::shared_ptr<OutputChannel>> first{std::make_shared<OutputChannel>()};
  e->submit(shared, greedy(1), first[0]);
  run_all(*e, first);
  const int64_t before = e->stats().prompt_tokens_computed;
  EXPECT_EQ(before, 32);
  std::vector<std::shared_ptr<OutputChannel>> second{std::make_shared<OutputChannel>()};
  e->submit(longer, greedy(1), second[0]);
  run_all(*e, second);
  EXPECT_EQ(e->stats().prompt_tokens_computed - before, 6);  // 32 cached tokens, 6 new
}

TEST_F(EngineTest, AbortWaitingPrefillingAndDecodingFreesEverything) {
  auto e = engine(config(/*budget=*/8));
  std::mt19937 rng(9);
  std::vector<std::shared_ptr<OutputChannel>> ch;
  std::vector<int64_t> ids;
  for (int len : {3, 30, 5}) {
    ch.push_back(std::make_shared<OutputChannel>());
    ids.push_back(e->submit(random_prompt(rng, len), greedy(50), ch.back()));
  }
  e->step();  // 3-token prompt prefilled, 30-token prompt chunk started
  e->step();  // first decodes, second still prefilling, third waiting
  EngineStats mid = e->stats();
  EXPECT_EQ(mid.num_running, 2);
  EXPECT_EQ(mid.num_waiting, 1);
  for (int64_t id : ids) e->abort(id);
  e->step();
  EngineStats after = e->stats();
  EXPECT_EQ(after.kv_blocks_free, after.kv_blocks_total);
  EXPECT_EQ(after.num_active_requests, 0);
  EXPECT_EQ(after.requests_aborted, 3);
  for (auto& c : ch) {
    FinishReason last = FinishReason::kNone;
    while (auto d = c->take(std::chrono::milliseconds(0))) {
      for (auto& comp : d->completions) {
        if (comp.finish_reason != FinishReason::kNone) last = comp.finish_reason;
      }
    }
    EXPECT_EQ(last, FinishReason::kAbort);
  }
}

TEST_F(EngineTest, ConsumerThatGoesAwayAbortsWithinOneStep) {
  auto e = engine(config());
  std::mt19937 rng(2);
  auto channel = std::make_shared<OutputChannel>();
  e->submit(random_prompt(rng, 10), greedy(100), channel);
  e->step();
  EXPECT_LT(e->stats().kv_blocks_free, e->stats().kv_blocks_total);
  channel.reset();  // the client disconnects
  e->step();
  EngineStats s = e->stats();
  EXPECT_EQ(s.requests_aborted, 1);
  EXPECT_EQ(s.num_active_requests, 0);
  EXPECT_EQ(s.kv_blocks_free, s.kv_blocks_total);
}

TEST_F(EngineTest, LaggingConsumerGetsCoalescedDeltas) {
  auto e = engine(config());
  std::mt19937 rng(4);
  auto channel = std::make_shared<OutputChannel>();
  std::vector<int32_t> prompt = random_prompt(rng, 8);
  e->submit(prompt, greedy(12), channel);
  while (e->has_work()) e->step();  // 12 steps, the consumer never looked
  auto out = channel->take(std::chrono::milliseconds(0));
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(out->finished);
  ASSERT_EQ(out->completions.size(), 1u);
  EXPECT_EQ(out->completions[0].token_ids, model::greedy_generate(*model_, prompt, 12));
  EXPECT_EQ(out->completions[0].finish_reason, FinishReason::kLength);
  EXPECT_FALSE(channel->take(std::chrono::milliseconds(0)).has_value());
}

TEST_F(EngineTest, ParallelSamplingSharesThePrompt) {
  auto e = engine(config());
  std::mt19937 rng(6);
  SamplingParams p;
  p.n = 3;
  p.seed = 99;
  p.max_tokens = 6;
  p.ignore_eos = true;
  p.logprobs = 2;
  auto channel = std::make_shared<OutputChannel>();
  e->submit(random_prompt(rng, 33), p, channel);
  while (e->has_work()) e->step();
  std::vector<std::vector<int32_t>> completions(3);
  int logprob_entries = 0;
  while (auto d = channel->take(std::chrono::milliseconds(0))) {
    for (auto& c : d->completions) {
      completions[static_cast<size_t>(c.index)].insert(completions[static_cast<size_t>(c.index)].end(),
                                                       c.token_ids.begin(), c.token_ids.end());
      logprob_entries += static_cast<int>(c.logprobs.size());
      for (auto& lp : c.logprobs) EXPECT_EQ(lp.top.size(), 2u);
    }
  }
  for (auto& c : completions) EXPECT_EQ(c.size(), 6u);
  EXPECT_EQ(logprob_entries, 18);
  EXPECT_NE(completions[0], completions[1]);  // different seeds per completion
  // The siblings start from the first one's cached blocks: 33 + 2 * (33 - 32) prompt tokens.
  EXPECT_EQ(e->stats().prompt_tokens_computed, 35);
}

TEST_F(EngineTest, QueueBoundAndValidationAtTheDoor) {
  EngineConfig c = config();
  c.max_queued_requests = 2;
  auto e = engine(c);
  auto ch = std::make_shared<OutputChannel>();
  e->submit({1, 2, 3}, greedy(2), ch);
  e->submit({1, 2, 3}, greedy(2), ch);
  EXPECT_THROW(e->submit({1, 2, 3}, greedy(2), ch), QueueFullError);
  EXPECT_THROW(e->submit({}, greedy(2), ch), Error);
  EXPECT_THROW(e->submit({1, 512}, greedy(2), ch), Error);
  SamplingParams bad = greedy(2);
  bad.top_p = 0.0f;
  EXPECT_THROW(e->submit({1}, bad, ch), Error);
  std::vector<int32_t> too_long(256, 1);
  EXPECT_THROW(e->submit(too_long, greedy(2), ch), Error);
}

TEST_F(EngineTest, ThreadedSubmitFromManyThreads) {
  auto e = engine(config(/*budget=*/64));
  e->start();
  std::vector<std::thread> clients;
  std::atomic<int> completed{0};
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      for (int i = 0; i < 10; ++i) {
        auto ch = std::make_shared<OutputChannel>();
        std::vector<int32_t> prompt = random_prompt(rng, 4 + static_cast<int>(rng() % 10));
        e->submit(prompt, greedy(5), ch);
        std::vector<int32_t> tokens;
        while (auto d = ch->take(std::chrono::seconds(30))) {
          for (auto& c : d->completions) tokens.insert(tokens.end(), c.token_ids.begin(), c.token_ids.end());
          if (d->finished) break;
        }
        if (tokens == model::greedy_generate(*model_, prompt, 5)) ++completed;
      }
    });
  }
  for (auto& c : clients) c.join();
  e->stop();
  EXPECT_EQ(completed, 40);
}

}  // namespace
}  // namespace tachyon::engine
