// Draft-model speculation on the CPU runner. The drafter (engine/draft_model_drafter.h) keeps a
// paged KV cache of its own and reuses the common prefix of what it computed before: its drafts
// for a sequence equal those of a fresh drafter that computes everything again, whatever was
// accepted or rejected in between. Served through the engine with a different random model as
// the draft and with the target itself as its own draft, every completion is token for token the
// plain run's (the suite's eight kinds of sampling); with itself as draft, greedy requests accept
// nearly every draft and take fewer steps. The draft cache gives every block back, survives
// being too small, and a vocabulary mismatch is refused.
#include <gtest/gtest.h>

#include <random>

#include "speculative_engine_suite.h"
#include "tachyon/engine/draft_model_drafter.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/model/safetensors.h"

namespace tachyon::engine::engine_draft_model_test {

using namespace speculative_test;  // NOLINT: the suite's vocabulary

class EngineDraftModelTest : public SpeculativeEngineSuite<23> {
 protected:
  static void SetUpTestSuite() {
    SpeculativeEngineSuite<23>::SetUpTestSuite();
    draft_dir_ = new std::filesystem::path(*dir_);
    *draft_dir_ += "-draft";
    model::make_model({.arch = "qwen3", .preset = "tiny", .seed = 41, .out_dir = *draft_dir_});
    draft_ = new model::DenseModel(model::DenseModel::load(*draft_dir_));
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*draft_dir_);
    delete draft_;
    delete draft_dir_;
    SpeculativeEngineSuite<23>::TearDownTestSuite();
  }

  static std::unique_ptr<DraftModelDrafter> make_drafter(const model::DenseModel& draft, int32_t k,
                                                         int32_t num_blocks = 160, int64_t max_batched = 32) {
    const core::EngineConfig c = engine_config({});
    return std::make_unique<DraftModelDrafter>(
        std::make_unique<runner::CpuModelRunner>(draft, num_blocks, c.block_size),
        DraftModelOptions{.num_tokens = k,
                          .num_blocks = num_blocks,
                          .block_size = c.block_size,
                          .max_model_len = c.scheduler.max_model_len,
                          .max_num_batched_tokens = max_batched,
                          .max_num_seqs = 8},
        model_->config().vocab_size);
  }
  static DrafterFactory factory(const model::DenseModel& draft, int32_t k) {
    return [&draft, k] { return make_drafter(draft, k); };
  }

  static inline std::filesystem::path* draft_dir_ = nullptr;
  static inline model::DenseModel* draft_ = nullptr;
};

core::SpeculativeConfig draft_config(int32_t k) {
  return {.method = "draft", .num_speculative_tokens = k, .draft_model = "(in memory)"};
}

// Sequences grow as an engine grows them (drafts accepted in part, a bonus token, sometimes a
// rollback to an earlier prefix); the incremental drafter's drafts equal a fresh drafter's.
TEST_F(EngineDraftModelTest, IncrementalDraftsEqualThoseOfAFreshDrafter) {
  std::mt19937 rng(3);
  for (int32_t k : {1, 4}) {
    auto drafter = make_drafter(*draft_, k);
    std::vector<std::vector<int32_t>> sequences(3);
    for (auto& s : sequences) s = random_prompt(rng);
    for (int round = 0; round < 12; ++round) {
      std::vector<DraftRequest> requests;
      for (size_t i = 0; i < sequences.size(); ++i) requests.push_back({static_cast<int64_t>(i), sequences[i], {}});
      drafter->propose_batch(requests);
      for (size_t i = 0; i < sequences.size(); ++i) {
        auto fresh = make_drafter(*draft_, k);
        const std::vector<int32_t> expected = fresh->propose(static_cast<int64_t>(i), sequences[i]);
        ASSERT_EQ(expected.size(), static_cast<size_t>(k));
        EXPECT_EQ(requests[i].drafts, expected) << "k " << k << " round " << round << " sequence " << i;
        // Accept a random number of the drafts, add a token of the target's, or roll back a bit.
        std::vector<int32_t>& s = sequences[i];
        const size_t accepted = rng() % (expected.size() + 1);
        s.insert(s.end(), expected.begin(), expected.begin() + static_cast<std::ptrdiff_t>(accepted));
        if (rng() % 4 == 0 && s.size() > 3) s.resize(s.size() - 1 - rng() % 3);
        s.push_back(static_cast<int32_t>(rng() % 512));
      }
    }
    for (size_t i = 0; i < sequences.size(); ++i) drafter->release(static_cast<int64_t>(i));
    EXPECT_EQ(drafter->num_cached_sequences(), 0u);
    EXPECT_EQ(drafter->num_free_blocks(), 160);
  }
}

// A catch-up longer than a step's token budget is split over steps; the drafts are the same.
TEST_F(EngineDraftModelTest, LongCatchUpsSplitOverStepsGiveTheSameDrafts) {
  std::mt19937 rng(9);
  std::vector<int32_t> tokens(90);
  for (auto& t : tokens) t = static_cast<int32_t>(rng() % 512);
  EXPECT_EQ(make_drafter(*draft_, 3, 160, 7)->propose(0, tokens), make_drafter(*draft_, 3, 160, 4096)->propose(0, tokens));
}

TEST_F(EngineDraftModelTest, DraftModelsNeverChangeTheTokens) {
  for (bool repetitive : {true, false}) {
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      std::vector<SpecRequest> requests = make_requests(seed, repetitive);
      set_stop_ids(requests);
      EngineStats plain_stats;
      const Completions plain = run(requests, {}, &plain_stats);
      for (int32_t k : {1, 3, 6}) {
        for (const model::DenseModel* draft : {draft_, model_}) {
          EngineStats stats;
          const Completions got = run(requests, draft_config(k), &stats, factory(*draft, k));
          const std::string what = std::string(repetitive ? "repetitive" : "random") + " seed " + std::to_string(seed) +
                                   " k " + std::to_string(k) + (draft == model_ ? " self-draft" : " other draft");
          expect_same(got, plain, requests, what);
          EXPECT_EQ(stats.generated_tokens, plain_stats.generated_tokens) << what;
          EXPECT_GT(stats.draft_tokens, 0) << what;
          EXPECT_LE(stats.draft_tokens_accepted, stats.draft_tokens) << what;
        }
      }
    }
  }
}

// With --tp 2 the served model's CPU thread ranks verify the draft model's drafts (the draft runs
// whole beside them) as one rank does: the suite's eight kinds of sampling give the plain
// tensor-parallel run's tokens and logprobs exactly, for another model and the target as draft.
TEST_F(EngineDraftModelTest, TensorParallelRanksVerifyTheDraftModelsDraftsExactly) {
  const model::ModelWeights weights = model::load_weights(model_->config(), model::SafetensorsCheckpoint(*dir_));
  const RunnerFactory tp2 = tensor_parallel_ranks(weights, 2);
  for (uint32_t seed : {4u, 5u}) {
    std::vector<SpecRequest> requests = make_requests(seed, seed == 4);
    set_stop_ids(requests);
    const Completions plain = run_with(requests, engine_config({}), nullptr, nullptr, tp2);
    for (int32_t k : {1, 3}) {
      for (const model::DenseModel* draft : {draft_, model_}) {
        EngineStats stats;
        const Completions got = run_with(requests, engine_config(draft_config(k)), &stats, factory(*draft, k), tp2);
        const std::string what = "tp 2 seed " + std::to_string(seed) + " k " + std::to_string(k) +
                                 (draft == model_ ? " self-draft" : " other draft");
        expect_same(got, plain, requests, what);
        EXPECT_GT(stats.draft_tokens, 0) << what;
        if (draft == model_) {
          EXPECT_GT(stats.draft_tokens_accepted, 0) << what;
        }
      }
    }
  }
}

// Expert parallelism and data-parallel attention need a mixture-of-experts target: tiny-deepseek
// (a vocabulary of 512, as the draft's). Over two tensor-parallel ranks with the experts split by
// expert (with and without two-batch overlap: a sequence's draft rows stay in its micro-batch), with
// decode context parallelism (its latent attention splits the cache by token), and over two
// data-parallel replicas (of one rank and of two; a sequence's draft rows run
// on its replica), another model's drafts, the target's own and n-gram drafts give the plain run of
// the same layout exactly: the suite's eight kinds of sampling, token for token and logprob for
// logprob.
TEST_F(EngineDraftModelTest, ParallelRanksOfALatentMoeTargetVerifyDraftsExactly) {
  const std::filesystem::path dir = draft_dir_->string() + "-moe-target";
  model::make_model({.arch = "deepseek_v3", .preset = "tiny-deepseek", .seed = 43, .out_dir = dir});
  const model::DenseModel target = model::DenseModel::load(dir);
  const model::ModelWeights weights = model::load_weights(target.config(), model::SafetensorsCheckpoint(dir));
  const std::vector<SpecRequest> requests = make_requests(6, true);
  const core::SpeculativeConfig ngram{.method = "ngram", .num_speculative_tokens = 3, .ngram_min = 1, .ngram_max = 3};
  const std::pair<RunnerFactory, std::string> layouts[] = {{tensor_parallel_ranks(weights, 2, true), "tp 2 ep"},
                                                           {two_batch_overlap_ranks(weights, 2), "tp 2 ep tbo"},
                                                           {decode_context_parallel_ranks(weights, 2, 2), "tp 2 dcp 2"},
                                                           {data_parallel_ranks(weights, 2, 1), "dp 2"},
                                                           {data_parallel_ranks(weights, 2, 2), "dp 2 tp 2"}};
  for (const auto& [ranks, layout] : layouts) {
    const Completions plain = run_with(requests, engine_config({}), nullptr, nullptr, ranks);
    for (const model::DenseModel* draft : {static_cast<const model::DenseModel*>(draft_), &target}) {
      const std::string what = layout + (draft == &target ? " self-draft" : " other draft");
      EngineStats stats;
      expect_same(run_with(requests, engine_config(draft_config(3)), &stats, factory(*draft, 3), ranks), plain,
                  requests, what);
      EXPECT_GT(stats.draft_tokens, 0) << what;
      if (draft == &target) {
        EXPECT_GT(stats.draft_tokens_accepted, 0) << what;
      }
    }
    EngineStats stats;
    expect_same(run_with(requests, engine_config(ngram), &stats, nullptr, ranks), plain, requests, layout + " ngram");
    EXPECT_GT(stats.draft_tokens_accepted, 0) << layout << " ngram";
  }
  std::filesystem::remove_all(dir);
}

// Prefill context parallelism (2 and 3 whole-model ranks): a verify step's rows are a chunk of
// 1 + k rows per sequence, which the dual-chunk split spreads over the ranks like a prefill chunk
// (a step of at least 2N rows); the logits rows come back in the step's order and are verified on
// the engine thread. Another model's drafts, the target's own and n-gram drafts give the plain run
// of the same ranks exactly.
TEST_F(EngineDraftModelTest, PrefillContextParallelRanksVerifyDraftsExactly) {
  const model::ModelWeights weights = model::load_weights(model_->config(), model::SafetensorsCheckpoint(*dir_));
  const std::vector<SpecRequest> requests = make_requests(7, true);
  const core::SpeculativeConfig ngram{.method = "ngram", .num_speculative_tokens = 3, .ngram_min = 1, .ngram_max = 3};
  for (int pcp : {2, 3}) {
    const RunnerFactory ranks = prefill_context_parallel_ranks(weights, pcp);
    const std::string layout = "pcp " + std::to_string(pcp);
    const Completions plain = run_with(requests, engine_config({}), nullptr, nullptr, ranks);
    const model::DenseModel* target = model_;
    for (const model::DenseModel* draft : {static_cast<const model::DenseModel*>(draft_), target}) {
      const std::string what = layout + (draft == target ? " self-draft" : " other draft");
      EngineStats stats;
      expect_same(run_with(requests, engine_config(draft_config(3)), &stats, factory(*draft, 3), ranks), plain,
                  requests, what);
      EXPECT_GT(stats.draft_tokens, 0) << what;
      if (draft == target) {
        EXPECT_GT(stats.draft_tokens_accepted, 0) << what;
      }
    }
    EngineStats stats;
    expect_same(run_with(requests, engine_config(ngram), &stats, nullptr, ranks), plain, requests, layout + " ngram");
    EXPECT_GT(stats.draft_tokens_accepted, 0) << layout << " ngram";
  }
}

// Over the FP8 KV cache (--kv-cache-dtype fp8) a draft model's drafts change no token of the plain
// FP8 run (logprobs within 1e-3: test_engine_ngram.cpp says why); the draft model keeps its own
// cache. The FP8 run differs from the bf16 one (the cache is FP8).
TEST_F(EngineDraftModelTest, DraftsOverAnFp8KvCacheNeverChangeTheTokens) {
  bool differs_from_bf16 = false;
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    const std::vector<SpecRequest> requests = make_requests(seed, seed == 1);
    const Completions plain = plain_fp8_kv_run(requests, differs_from_bf16);
    const model::DenseModel* target = model_;
    for (const model::DenseModel* draft : {static_cast<const model::DenseModel*>(draft_), target}) {
      const std::string what =
          "fp8 kv seed " + std::to_string(seed) + (draft == target ? " self-draft" : " other draft");
      EngineStats stats;
      expect_same(run_with(requests, fp8_kv_config(draft_config(3)), &stats, factory(*draft, 3)), plain, requests, what,
                  1e-3);
      EXPECT_GT(stats.draft_tokens, 0) << what;
    }
  }
  EXPECT_TRUE(differs_from_bf16) << "the FP8 cache changed no logprob (is it FP8?)";
}

// The target as its own draft: a greedy draft is what the target draws, so nearly all are
// accepted (a draft is computed in another step shape than its check, so float rounding may flip
// a near tie) and the same tokens take far fewer steps. A random other model is accepted rarely.
TEST_F(EngineDraftModelTest, SelfDraftingAcceptsNearlyEveryGreedyDraft) {
  std::mt19937 rng(17);
  std::vector<SpecRequest> requests(6);
  for (SpecRequest& r : requests) {
    r.prompt = random_prompt(rng);
    r.params.temperature = 0.0f;
    r.params.ignore_eos = true;
    r.params.max_tokens = 40;
  }
  EngineStats plain_stats, self_stats, other_stats;
  const Completions plain = run(requests, {}, &plain_stats);
  expect_same(run(requests, draft_config(4), &self_stats, factory(*model_, 4)), plain, requests, "self");
  expect_same(run(requests, draft_config(4), &other_stats, factory(*draft_, 4)), plain, requests, "other");
  EXPECT_GE(self_stats.draft_tokens_accepted, self_stats.draft_tokens * 95 / 100)
      << self_stats.draft_tokens_accepted << " of " << self_stats.draft_tokens;
  EXPECT_LT(self_stats.steps * 2, plain_stats.steps) << self_stats.steps << " vs " << plain_stats.steps;
  EXPECT_LT(other_stats.draft_tokens_accepted, self_stats.draft_tokens_accepted);
}

// A draft cache too small for a sequence gives it no drafts (the target decodes on); a sequence
// not drafting now gives its blocks up to one that needs them.
TEST_F(EngineDraftModelTest, AFullDraftCacheMeansNoDraftsNotAnError) {
  auto drafter = make_drafter(*draft_, 3, /*num_blocks=*/4);  // 16 tokens at block size 4
  std::vector<int32_t> long_tokens(20, 7);
  EXPECT_TRUE(drafter->propose(0, long_tokens).empty());
  std::vector<int32_t> short_tokens(9, 5);
  EXPECT_EQ(drafter->propose(1, short_tokens).size(), 3u);  // 9 + 2 slots: 3 blocks
  EXPECT_EQ(drafter->propose(2, short_tokens).size(), 3u);  // sequences 0 and 1 are evicted for it
  EXPECT_EQ(drafter->num_cached_sequences(), 1u);
  EXPECT_EQ(drafter->num_free_blocks(), 1);
  EXPECT_EQ(drafter->propose(2, short_tokens).size(), 3u);  // its own cache is reused
  drafter->release(2);
  EXPECT_EQ(drafter->num_free_blocks(), 4);
}

struct SixTokenRunner : runner::ModelRunner {
  void launch(const core::StepPlan&) override {}
  core::StepOutput wait() override { return {}; }
  int64_t vocab_size() const override { return 6; }
};

TEST_F(EngineDraftModelTest, ADraftModelWithAnotherVocabularyIsRefused) {
  try {
    DraftModelDrafter drafter(std::make_unique<SixTokenRunner>(), {.num_tokens = 2, .num_blocks = 8, .max_model_len = 32},
                              model_->config().vocab_size);
    FAIL() << "accepted a draft model with 6 tokens";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must share the served model's tokenizer"), std::string::npos) << e.what();
  }
}

}  // namespace tachyon::engine::engine_draft_model_test
