// Data-parallel attention on CPU thread ranks (runner/dp_cpu_model_runner.h) against one rank:
//   model   D replicas (each its own prompt and KV cache, the MoE layers expert-parallel over all
//           D x T ranks, one replica idling through the MoE layers for some steps) give every
//           replica's prompt the logits of that prompt run alone on one rank, within 1e-5 of the
//           logit scale, and the same greedy tokens;
//   engine  EngineCore over DpCpuModelRunner gives eight different prompts (continuous batching,
//           chunked prefill, two sharing a cached prefix, one with n = 2) the reference runner's
//           greedy tokens, and the prompts are placed round-robin;
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
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/runner/dp_cpu_model_runner.h"

namespace tachyon::model {
namespace {

constexpr double kDpLogitTolerance = 1e-5;  // max |diff| / max |reference logit|, f32

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
          EXPECT_LE(dp_relative_diff(run.logits[step], reference.logits[step]), kDpLogitTolerance)
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

// placed: when given, receives the DP runner's placement counts before the engine goes away.
std::vector<std::vector<int32_t>> dp_run_engine(std::unique_ptr<runner::ModelRunner> runner, int64_t vocab,
                                                std::vector<int64_t>* placed = nullptr) {
  const auto* dp = dynamic_cast<const runner::DpCpuModelRunner*>(runner.get());
  engine::EngineCore engine(dp_engine_config(), std::move(runner));
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
  return tokens;
}

TEST(DpFamilies, EngineGreedyTokensMatchOneRank) {
  const core::EngineConfig c = dp_engine_config();
  for (const DpFamily& f : kDpFamilies) {
    SCOPED_TRACE(f.preset);
    const ModelWeights weights = dp_weights(f);
    const int64_t vocab = weights.config.vocab_size;
    const auto reference = dp_run_engine(
        std::make_unique<runner::CpuModelRunner>(std::make_unique<DenseModel>(weights), c.num_blocks, c.block_size),
        vocab);
    for (const DpLayout& layout : kDpLayouts) {
      auto runner =
          std::make_unique<runner::DpCpuModelRunner>(weights, layout.dp, layout.tp, c.num_blocks, c.block_size);
      std::vector<int64_t> placed;
      EXPECT_EQ(dp_run_engine(std::move(runner), vocab, &placed), reference) << layout.name();
      // Round-robin: the replicas were given new sequences in turn. Of the 9 sequences (8 prompts
      // and prompt 3's sibling) two start over cached blocks and follow their owner instead:
      // prompt 6 (prompt 5's first two blocks) and the sibling (prompt 3's).
      ASSERT_EQ(placed.size(), static_cast<size_t>(layout.dp));
      int64_t total = 0;
      for (int64_t count : placed) total += count;
      EXPECT_EQ(total, 7) << layout.name();
      EXPECT_LE(*std::max_element(placed.begin(), placed.end()) - *std::min_element(placed.begin(), placed.end()), 1)
          << layout.name();
    }
  }
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

TEST(DpPlacement, NewSequencesGoRoundRobinAndStayWithTheirFirstBlock) {
  runner::DpPlacement placement(3);
  EXPECT_EQ(placement.place(planned(0, 0, 4, 0, {7})), 0);
  EXPECT_EQ(placement.place(planned(1, 0, 4, 0, {2})), 1);
  EXPECT_EQ(placement.place(planned(2, 0, 4, 0, {9})), 2);
  EXPECT_EQ(placement.place(planned(3, 0, 4, 0, {4})), 0);
  EXPECT_EQ(placement.place(planned(1, 0, 1, 4, {2, 3})), 1);   // its next step
  EXPECT_EQ(placement.place(planned(5, 0, 1, 4, {9, 11})), 2);  // a prefix hit on sequence 2's first block
  EXPECT_EQ(placement.placed(), (std::vector<int64_t>{2, 1, 1}));
  EXPECT_THROW(placement.place(planned(6, 0, 1, 4, {30})), Error);  // computed rows nobody holds
}

TEST(DpPlacement, SplitPlanReindexesTokensAndKeepsTheLogitsRowsOrder) {
  core::StepPlan plan;
  plan.block_size = 4;
  plan.sequences = {planned(0, 0, 3, 0, {1}), planned(1, 3, 2, 0, {2}), planned(2, 5, 1, 0, {3})};
  plan.token_ids = {10, 11, 12, 20, 21, 30};
  plan.positions = {0, 1, 2, 0, 1, 0};
  plan.slot_mapping = {4, 5, 6, 8, 9, 12};
  plan.logits_rows = {2, 4, 5};
  runner::DpPlacement placement(2);
  const runner::DpStep step = runner::split_plan(plan, placement);
  ASSERT_EQ(step.plans.size(), 2u);
  EXPECT_EQ(step.plans[0].token_ids, (std::vector<int32_t>{10, 11, 12, 30}));  // sequences 0 and 2
  EXPECT_EQ(step.plans[0].slot_mapping, (std::vector<int64_t>{4, 5, 6, 12}));
  EXPECT_EQ(step.plans[0].sequences[1].first_token, 3);
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
