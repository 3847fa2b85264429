// Data-parallel attention on CPU thread ranks (runner/dp_cpu_model_runner.h) against one rank:
//   model   D replicas (each its own prompt and KV cache, the MoE layers expert-parallel over all
//           D x T ranks, one replica idling through the MoE layers for some steps) give every
//           replica's prompt the logits of that prompt run alone on one rank, bit for bit at
//           TP 1 (attention whole per replica, the fixed-order CPU product gives a row the same
//           bits in any batch, and the expert-parallel combine adds a token's experts in the
//           single rank's order), within 1e-5 of the logit scale at TP 2 (the TP all-reduce adds
//           the ranks' partial sums in another order), and the same greedy tokens;
//   engine  EngineCore over DpCpuModelRunner gives eight different prompts (continuous batching,
//           chunked prefill, two sharing a cached prefix, one with n = 2) the reference runner's
//           greedy tokens and prefix hits; each replica's cache holds the per-rank num_blocks and
//           the engine plans D times as many, so a load that one replica's blocks cannot run at
//           once runs at once under DP 2 (same tokens);
//   fp8     FP8 weights and an FP8 KV cache: one rank's tokens with the same;
//   async   asynchronous scheduling: one rank's synchronous tokens;
//   placement and plan splitting (dp_split.h), and the refusals of check_dp_size.
// For DP 2 and 4 (TP 1) and DP 2 x TP 2 on tiny Qwen3-MoE, Mixtral, DeepSeek-V3, V3.2 and GLM-5.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../engine_run.h"
#include "tachyon/base/check.h"
#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/online_fp8.h"
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/model/tp_shard_loader.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/runner/dp_cpu_model_runner.h"

namespace tachyon::model {
namespace {

constexpr double kDpLogitTolerance = 1e-5;  // max |diff| / max |reference logit|, f32, at TP > 1 (0 at TP 1)

struct DpFamily {
  const char* arch;
  const char* preset;
};
constexpr DpFamily kDpFamilies[] = {{"qwen3_moe", "tiny-moe"},
                                    {"mixtral", "tiny-mixtral"},
                                    {"deepseek_v3", "tiny-deepseek"},
                                    {"deepseek_v32", "tiny-dsa"},
                                    {"glm_moe_dsa", "tiny-glm-dsa"}};

struct DpLayout {
  int dp = 2;
  int tp = 1;
  std::string name() const { return "dp " + std::to_string(dp) + " x tp " + std::to_string(tp); }
};
const DpLayout kDpLayouts[] = {{2, 1}, {4, 1}, {2, 2}};

ModelWeights dp_weights(const DpFamily& f) {
  auto dir = std::filesystem::temp_directory_path() /
             ("tachyon-dp-families-" + std::to_string(::getpid()) + "-" + f.preset);
  make_model({.arch = f.arch, .preset = f.preset, .seed = 3, .out_dir = dir});
  ModelWeights weights = load_weights(ModelConfig::from_dir(dir), SafetensorsCheckpoint(dir));
  std::filesystem::remove_all(dir);
  return weights;
}

std::vector<int32_t> dp_prompt(int replica, int64_t vocab) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 6 + 3 * replica; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + replica * 101 + 11) % vocab));
  return prompt;
}

int32_t dp_argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// One prompt's logits: the prompt's last row, then one row per decode step; and its tokens.
struct PromptRun {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
  std::string error;
};

// decode_steps[d]: how many decode steps replica d's prompt takes; replicas that are done idle
// through the MoE layers while the others go on (steps are in lockstep).
std::vector<PromptRun> replica_runs(const ModelWeights& full, const DpLayout& layout, const std::vector<int>& decode_steps) {
  const int ranks = layout.dp * layout.tp;
  const int steps = *std::max_element(decode_steps.begin(), decode_steps.end());
  dist::CpuWorld ep_world(ranks);
  std::vector<std::unique_ptr<dist::CpuWorld>> tp_worlds;
  for (int d = 0; d < layout.dp; ++d) tp_worlds.push_back(std::make_unique<dist::CpuWorld>(layout.tp));
  std::vector<PromptRun> runs(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int g = 0; g < ranks; ++g) {
    threads.emplace_back([&, g] {
      PromptRun& run = runs[static_cast<size_t>(g)];
      const int d = g / layout.tp;
      try {
        dist::CpuCommunicator tp(*tp_worlds[static_cast<size_t>(d)], g % layout.tp), ep(ep_world, g);
        TpDenseModel model(shard_weights(full, g % layout.tp, layout.tp, g, ranks), tp, &ep);
        SequenceKvCache cache(model.config(), 64, MlaAttentionForm::kAbsorbed);
        const int64_t vocab = full.config.vocab_size;
        const std::vector<float> prompt_logits = model.forward(dp_prompt(d, vocab), cache);
        run.logits.push_back(prompt_logits);
        run.tokens.push_back(dp_argmax(prompt_logits));
        for (int step = 0; step < steps; ++step) {
          if (step >= decode_steps[static_cast<size_t>(d)]) {
            model.idle_forward();
            continue;
          }
          run.logits.push_back(model.forward(std::span<const int32_t>(&run.tokens.back(), 1), cache));
          run.tokens.push_back(dp_argmax(run.logits.back()));
        }
      } catch (const std::exception& e) {
        run.error = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return runs;
}

PromptRun reference_run(const ModelWeights& full, int replica, int decode_steps) {
  const DenseModel model{ModelWeights(full)};
  SequenceKvCache cache(full.config, 64, MlaAttentionForm::kAbsorbed);
  PromptRun run;
  run.logits.push_back(model.forward(dp_prompt(replica, full.config.vocab_size), cache));
  run.tokens.push_back(dp_argmax(run.logits.back()));
  for (int step = 0; step < decode_steps; ++step) {
    run.logits.push_back(model.forward(std::span<const int32_t>(&run.tokens.back(), 1), cache));
    run.tokens.push_back(dp_argmax(run.logits.back()));
  }
  return run;
}

double dp_relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / scale;
}

TEST(DpFamilies, EveryReplicaMatchesItsPromptRunAlone) {
  for (const DpFamily& f : kDpFamilies) {
    SCOPED_TRACE(f.preset);
    const ModelWeights full = dp_weights(f);
    for (const DpLayout& layout : kDpLayouts) {
      SCOPED_TRACE(layout.name());
      std::vector<int> decode_steps;  // replica 1 stops early and idles
      for (int d = 0; d < layout.dp; ++d) decode_steps.push_back(d == 1 ? 2 : 6);
      const std::vector<PromptRun> runs = replica_runs(full, layout, decode_steps);
      for (int g = 0; g < layout.dp * layout.tp; ++g) {
        const int d = g / layout.tp;
        const PromptRun& run = runs[static_cast<size_t>(g)];
        ASSERT_EQ(run.error, "") << "rank " << g;
        const PromptRun reference = reference_run(full, d, decode_steps[static_cast<size_t>(d)]);
        EXPECT_EQ(run.tokens, reference.tokens) << "rank " << g;
        ASSERT_EQ(run.logits.size(), reference.logits.size()) << "rank " << g;
        for (size_t step = 0; step < run.logits.size(); ++step) {
          EXPECT_LE(dp_relative_diff(run.logits[step], reference.logits[step]), layout.tp == 1 ? 0.0 : kDpLogitTolerance)
              << "rank " << g << " step " << step;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Through the engine.

core::EngineConfig dp_engine_config() {
  core::EngineConfig c;
  c.scheduler.max_num_batched_tokens = 16;  // the longer prompts are chunked
  c.scheduler.max_model_len = 128;
  c.num_blocks = 64;
  c.block_size = 4;
  return c;
}

// placed: when given, receives the DP runner's placement counts before the engine goes away;
// stats: the engine's stats at the end.
std::vector<std::vector<int32_t>> dp_run_engine(std::unique_ptr<runner::ModelRunner> runner, int64_t vocab,
                                                std::vector<int64_t>* placed = nullptr,
                                                engine::EngineStats* stats = nullptr,
                                                core::AsyncScheduling async = core::AsyncScheduling::kOff) {
  const auto* dp = dynamic_cast<const runner::DpCpuModelRunner*>(runner.get());
  core::EngineConfig config = dp_engine_config();
  config.device.async_scheduling = async;
  engine::EngineCore engine(config, std::move(runner));
  core::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 6;
  params.ignore_eos = true;
  std::vector<std::shared_ptr<engine::OutputChannel>> channels;
  int index = 0;
  for (int length : {3, 21, 9, 17, 1, 12, 12, 5}) {
    std::vector<int32_t> prompt;
    // Prompts 5 and 6 share their first 8 tokens (two full blocks: a prefix-cache hit).
    const int salt = index == 6 ? 5 : index;
    for (int i = 0; i < length; ++i) {
      prompt.push_back(static_cast<int32_t>((i * 37 + salt * 101 + 11 + (i >= 8 ? index : 0)) % vocab));
    }
    core::SamplingParams p = params;
    if (index == 3) p.n = 2;  // two completions: a sibling over the first one's cached prompt
    channels.push_back(std::make_shared<engine::OutputChannel>());
    engine.submit(prompt, p, channels.back());
    ++index;
  }
  std::vector<std::vector<int32_t>> tokens = testing::run_engine_to_idle(engine, channels, 10000);
  if (placed != nullptr && dp != nullptr) *placed = dp->placement().placed();
  if (stats != nullptr) *stats = engine.stats();
  return tokens;
}

TEST(DpFamilies, EngineGreedyTokensMatchOneRank) {
  const core::EngineConfig c = dp_engine_config();
  for (const DpFamily& f : kDpFamilies) {
    SCOPED_TRACE(f.preset);
    const ModelWeights weights = dp_weights(f);
    const int64_t vocab = weights.config.vocab_size;
    engine::EngineStats reference_stats;
    const auto reference = dp_run_engine(
        std::make_unique<runner::CpuModelRunner>(std::make_unique<DenseModel>(weights), c.num_blocks, c.block_size),
        vocab, nullptr, &reference_stats);
    ASSERT_GT(reference_stats.kv.prefix_hit_tokens, 0);
    for (const DpLayout& layout : kDpLayouts) {
      auto runner =
          std::make_unique<runner::DpCpuModelRunner>(weights, layout.dp, layout.tp, c.num_blocks, c.block_size);
      std::vector<int64_t> placed;
      engine::EngineStats stats;
      EXPECT_EQ(dp_run_engine(std::move(runner), vocab, &placed, &stats), reference) << layout.name();
      // The prefix hits (prompt 6 over prompt 5's first two blocks, prompt 3's sibling over its
      // prompt) were found in the pool of the replica that computed them, as one cache finds them.
      EXPECT_EQ(stats.kv.prefix_hit_tokens, reference_stats.kv.prefix_hit_tokens) << layout.name();
      EXPECT_EQ(stats.kv_blocks_total, layout.dp * c.num_blocks) << layout.name();
      // Of the 9 sequences (8 prompts and prompt 3's sibling) those two start over cached blocks;
      // the other 7 start from nothing, spread over every replica.
      ASSERT_EQ(placed.size(), static_cast<size_t>(layout.dp));
      int64_t total = 0;
      for (int64_t count : placed) total += count;
      EXPECT_EQ(total, 7) << layout.name();
      EXPECT_GT(*std::min_element(placed.begin(), placed.end()), 0) << layout.name();
    }
  }
}

// Asynchronous scheduling (step n + 1 planned and launched before step n is applied; the runner
// resolves its deferred tokens from step n's samples): one rank's synchronous tokens.
TEST(DpFamilies, AsynchronousSchedulingGivesOneRanksTokens) {
  const core::EngineConfig c = dp_engine_config();
  const ModelWeights weights = dp_weights(kDpFamilies[2]);
  const int64_t vocab = weights.config.vocab_size;
  const auto reference = dp_run_engine(
      std::make_unique<runner::CpuModelRunner>(std::make_unique<DenseModel>(weights), c.num_blocks, c.block_size),
      vocab);
  for (const DpLayout& layout : kDpLayouts) {
    auto runner = std::make_unique<runner::DpCpuModelRunner>(weights, layout.dp, layout.tp, c.num_blocks, c.block_size);
    EXPECT_EQ(dp_run_engine(std::move(runner), vocab, nullptr, nullptr, core::AsyncScheduling::kOn), reference)
        << layout.name();
  }
}

// FP8 weights (online quantization: each matrix's E4M3 round trip, as --quantization fp8 loads them
// on the CPU) and an FP8 KV cache (each replica's own): the engine gives one rank's greedy tokens
// with the same weights and cache, at every layout. The FP8 cache changes tokens (it is FP8).
TEST(DpFamilies, Fp8WeightsAndAnFp8KvCacheGiveOneRanksTokens) {
  const core::EngineConfig c = dp_engine_config();
  bool cache_changed_a_token = false;
  for (const DpFamily& f : {kDpFamilies[0], kDpFamilies[2]}) {
    SCOPED_TRACE(f.preset);
    ModelWeights weights = dp_weights(f);
    quantize_weights_fp8(weights);
    const int64_t vocab = weights.config.vocab_size;
    const auto one_rank = [&](bool fp8_kv_cache) {
      return dp_run_engine(std::make_unique<runner::CpuModelRunner>(std::make_unique<DenseModel>(weights), c.num_blocks,
                                                                    c.block_size, MlaAttentionForm::kAbsorbed,
                                                                    fp8_kv_cache),
                           vocab);
    };
    const auto reference = one_rank(true);
    cache_changed_a_token = cache_changed_a_token || one_rank(false) != reference;
    for (const DpLayout& layout : kDpLayouts) {
      auto runner = std::make_unique<runner::DpCpuModelRunner>(weights, layout.dp, layout.tp, c.num_blocks,
                                                               c.block_size, /*fp8_kv_cache=*/true);
      EXPECT_EQ(dp_run_engine(std::move(runner), vocab), reference) << layout.name();
    }
  }
  EXPECT_TRUE(cache_changed_a_token) << "the FP8 cache changed no token (is it FP8?)";
}

// The per-rank KV budget: each replica's cache holds num_blocks blocks, and the engine plans
// D * num_blocks of them.
TEST(DpFamilies, EachReplicaHoldsThePerRankBlocks) {
  const ModelWeights weights = dp_weights(kDpFamilies[2]);
  for (const DpLayout& layout : kDpLayouts) {
    auto runner = std::make_unique<runner::DpCpuModelRunner>(weights, layout.dp, layout.tp, 12, 4);
    EXPECT_EQ(runner->kv_cache_replicas(), layout.dp) << layout.name();
    EXPECT_EQ(runner->kv_blocks_per_replica(), 12) << layout.name();
    core::EngineConfig c = dp_engine_config();
    c.num_blocks = 12;
    c.scheduler.max_model_len = 48;
    engine::EngineCore engine(c, std::move(runner));
    EXPECT_EQ(engine.stats().kv_blocks_total, 12 * layout.dp) << layout.name();
    EXPECT_EQ(engine.stats().kv_blocks_free, 12 * layout.dp) << layout.name();
  }
}

// Two prompts of 7 blocks each (20 prompt tokens + 8 generated, blocks of 4) with 8 blocks per
// rank: one replica runs them one after the other (the second waits for the first's blocks),
// two replicas run them side by side, with the same greedy tokens.
TEST(DpFamilies, ALoadThatOneReplicaCannotHoldRunsAtOnceOnTwo) {
  const ModelWeights weights = dp_weights(kDpFamilies[2]);
  const int64_t vocab = weights.config.vocab_size;
  core::EngineConfig c = dp_engine_config();
  c.num_blocks = 8;
  c.block_size = 4;
  c.scheduler.max_model_len = 32;
  c.scheduler.max_num_batched_tokens = 64;
  auto run = [&](std::unique_ptr<runner::ModelRunner> runner, int64_t& max_running) {
    engine::EngineCore engine(c, std::move(runner));
    core::SamplingParams params;
    params.temperature = 0.0f;
    params.max_tokens = 8;
    params.ignore_eos = true;
    std::vector<std::shared_ptr<engine::OutputChannel>> channels;
    for (int p = 0; p < 2; ++p) {
      std::vector<int32_t> prompt;
      for (int i = 0; i < 20; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + p * 101 + 5) % vocab));
      channels.push_back(std::make_shared<engine::OutputChannel>());
      engine.submit(prompt, params, channels.back());
    }
    max_running = 0;
    for (int guard = 0; engine.has_work() && guard < 1000; ++guard) {
      engine.step();
      max_running = std::max(max_running, engine.stats().num_running);
      EXPECT_EQ(engine.stats().preemptions, 0);
    }
    return testing::run_engine_to_idle(engine, channels);
  };
  int64_t one = 0, two = 0;
  const auto reference = run(
      std::make_unique<runner::CpuModelRunner>(std::make_unique<DenseModel>(weights), c.num_blocks, c.block_size), one);
  const auto dp = run(std::make_unique<runner::DpCpuModelRunner>(weights, 2, 1, c.num_blocks, c.block_size), two);
  EXPECT_EQ(one, 1);  // the second prompt waited
  EXPECT_EQ(two, 2);  // both ran at once, one per replica
  EXPECT_EQ(dp, reference);
  ASSERT_EQ(reference.size(), 2u);
  EXPECT_EQ(reference[1].size(), 8u);
}

// ---------------------------------------------------------------------------------------------
// Placement and splitting.

core::ScheduledSequence planned(int64_t id, int64_t first_token, int64_t tokens, int64_t computed,
                                std::vector<int32_t> blocks) {
  core::ScheduledSequence s;
  s.sequence_id = id;
  s.first_token = first_token;
  s.num_tokens = tokens;
  s.num_computed = computed;
  s.block_table = std::move(blocks);
  s.sample = true;
  return s;
}

// The factory's load (tp_shard_loader.h load_f32_shards at dp_shard_places): each rank's shard cut
// layer by layer as read is, bit for bit, shard_weights of the whole model at that rank's place
// (TP rank g % T of its replica, expert-parallel rank g of all D x T); online FP8 too.
TEST(DpPlacement, ShardsReadLayerByLayerAreTheWholeModelsShardsAtEachRanksPlace) {
  for (const DpFamily& f : {kDpFamilies[0], kDpFamilies[2]}) {
    for (const auto& [dp, tp] : {std::pair{2, 1}, std::pair{2, 2}}) {
      for (bool online_fp8 : {false, true}) {
        SCOPED_TRACE(::testing::Message() << f.preset << " dp " << dp << " tp " << tp << (online_fp8 ? " fp8" : ""));
        const auto dir = std::filesystem::temp_directory_path() /
                         ("tachyon-dp-loader-" + std::to_string(::getpid()) + "-" + f.preset);
        make_model({.arch = f.arch, .preset = f.preset, .seed = 4, .out_dir = dir});
        const ModelConfig config = ModelConfig::from_dir(dir);
        const SafetensorsCheckpoint checkpoint(dir);
        ModelWeights whole = load_weights(config, checkpoint);
        if (online_fp8) quantize_weights_fp8(whole);
        const std::vector<TpShard> shards =
            load_f32_shards(config, checkpoint, runner::dp_shard_places(dp, tp), online_fp8);
        ASSERT_EQ(shards.size(), static_cast<size_t>(dp * tp));
        for (int g = 0; g < dp * tp; ++g) {
          const TpShard& got = shards[static_cast<size_t>(g)];
          const TpShard want = shard_weights(whole, g % tp, tp, g, dp * tp);
          EXPECT_EQ(got.tp_rank, want.tp_rank) << "rank " << g;
          EXPECT_EQ(got.expert_begin, want.expert_begin) << "rank " << g;
          EXPECT_EQ(got.expert_count, want.expert_count) << "rank " << g;
          ASSERT_EQ(got.weights.layers.size(), want.weights.layers.size());
          for (size_t l = 0; l < want.weights.layers.size(); ++l) {
            EXPECT_TRUE(got.weights.layers[l] == want.weights.layers[l]) << "rank " << g << " layer " << l;
          }
          EXPECT_EQ(got.weights.embed_tokens, want.weights.embed_tokens) << "rank " << g;
          EXPECT_EQ(got.weights.lm_head, want.weights.lm_head) << "rank " << g;
        }
        std::filesystem::remove_all(dir);
      }
    }
  }
}

TEST(DpPlacement, ASequenceRunsOnThePoolOfItsBlocks) {
  runner::DpPlacement placement(3, 10);  // replica d's blocks: [10 d, 10 d + 10)
  EXPECT_EQ(placement.place(planned(0, 0, 4, 0, {7})), 0);
  EXPECT_EQ(placement.place(planned(1, 0, 4, 0, {12})), 1);
  EXPECT_EQ(placement.place(planned(2, 0, 4, 0, {29, 20})), 2);
  EXPECT_EQ(placement.place(planned(1, 0, 1, 4, {12, 13})), 1);   // its next step
  EXPECT_EQ(placement.place(planned(5, 0, 1, 4, {29, 21})), 2);  // a prefix hit on sequence 2's first block
  EXPECT_EQ(placement.placed(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_THROW(placement.place(planned(6, 0, 1, 4, {9, 10})), Error);  // spans two replicas' pools
  EXPECT_THROW(placement.place(planned(7, 0, 1, 0, {30})), Error);     // past the last replica
}

TEST(DpPlacement, SplitPlanReindexesTokensAndKeepsTheLogitsRowsOrder) {
  core::StepPlan plan;
  plan.block_size = 4;
  // Replica 0's blocks are [0, 8), replica 1's [8, 16): sequence 1's block 10 is its block 2.
  plan.sequences = {planned(0, 0, 3, 0, {1}), planned(1, 3, 2, 0, {10}), planned(2, 5, 1, 0, {3})};
  plan.token_ids = {10, 11, 12, 20, 21, 30};
  plan.positions = {0, 1, 2, 0, 1, 0};
  plan.slot_mapping = {4, 5, 6, 40, 41, 12};
  plan.logits_rows = {2, 4, 5};
  runner::DpPlacement placement(2, 8);
  const runner::DpStep step = runner::split_plan(plan, placement);
  ASSERT_EQ(step.plans.size(), 2u);
  EXPECT_EQ(step.plans[0].token_ids, (std::vector<int32_t>{10, 11, 12, 30}));  // sequences 0 and 2
  EXPECT_EQ(step.plans[0].slot_mapping, (std::vector<int64_t>{4, 5, 6, 12}));
  EXPECT_EQ(step.plans[0].sequences[1].first_token, 3);
  EXPECT_EQ(step.plans[0].sequences[1].block_table, (std::vector<int32_t>{3}));
  EXPECT_EQ(step.plans[1].sequences[0].block_table, (std::vector<int32_t>{2}));  // in replica 1's cache
  EXPECT_EQ(step.plans[1].slot_mapping, (std::vector<int64_t>{8, 9}));
  EXPECT_EQ(step.plans[0].logits_rows, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(step.plans[1].token_ids, (std::vector<int32_t>{20, 21}));
  EXPECT_EQ(step.plans[1].positions, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(step.plans[1].logits_rows, (std::vector<int64_t>{1}));
  const std::vector<std::pair<int, int64_t>> rows = {{0, 0}, {1, 0}, {0, 1}};
  EXPECT_EQ(step.rows, rows);
}

std::string dp_error(const ModelConfig& config, int dp, int tp) {
  try {
    check_dp_size(config, dp, tp);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DpPlacement, DenseModelsAndSizesThatDoNotDivideAreRefused) {
  const ModelConfig dense = make_model_config({.arch = "llama", .preset = "tiny"});
  EXPECT_NE(dp_error(dense, 2, 1).find("has no mixture-of-experts layer"), std::string::npos) << dp_error(dense, 2, 1);
  const ModelConfig mixtral = make_model_config({.arch = "mixtral", .preset = "tiny-mixtral"});  // 8 experts
  EXPECT_NE(dp_error(mixtral, 3, 1).find("3 expert-parallel ranks do not divide num_experts 8"), std::string::npos)
      << dp_error(mixtral, 3, 1);
  ModelConfig twelve = mixtral;
  twelve.num_experts = 12;  // 2 x 3 ranks divide the experts, 3 does not divide the 4 heads
  EXPECT_NE(dp_error(twelve, 2, 3).find("does not divide num_attention_heads 4"), std::string::npos)
      << dp_error(twelve, 2, 3);
  EXPECT_EQ(dp_error(mixtral, 4, 2), "");
}

}  // namespace
}  // namespace tachyon::model
