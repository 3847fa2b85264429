// The MoE, latent-attention and sparse-attention families across CPU thread ranks, against the
// one-rank reference (DenseModel, CpuModelRunner):
//   model  every rank's logits over a 12-token prompt and 8 greedy decode steps are within 1e-5
//          of the logit scale of the reference's (the ranks' partial sums add in another order,
//          so not bit-exact), bit-identical on every rank, and the greedy tokens are the same;
//   engine EngineCore over TpCpuModelRunner gives five prompts (continuous batching, chunked
//          prefill) the reference runner's greedy tokens.
// For TP 2 and 4 and EP 2 and 4 on tiny Qwen3-MoE, Mixtral, DeepSeek-V3 (with and without q
// LoRA), DeepSeek-V3.2 (DSA) and GLM-5 (DSA with shared layers). EP is also run twice: its
// all-to-all-v combine adds each token's experts in expert order, so the two runs are bit-identical. And the shards hold what
// tp_shard.h says (experts whole under EP, each split under TP), and bad sizes are refused.
// Tolerance: 1e-5 relative to the largest |logit| (measured: at most 1.5e-6), f32 throughout.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../engine_run.h"
#include "../tiny_families.h"
#include "tachyon/base/check.h"
#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/runner/tp_cpu_model_runner.h"

namespace tachyon::model {
namespace {

constexpr int64_t kPromptTokens = 12;
constexpr int64_t kDecodeSteps = 8;
constexpr double kLogitTolerance = 1e-5;  // max |diff| / max |reference logit|, f32

using Family = testing::TinyFamily;
constexpr Family kFamilies[] = {{"qwen3_moe", "tiny-moe"},          {"qwen3_moe", "tiny-moe-nonorm"},
                                {"mixtral", "tiny-mixtral"},        {"deepseek_v3", "tiny-deepseek"},
                                {"deepseek_v3", "tiny-deepseek-noqlora"}, {"deepseek_v32", "tiny-dsa"},
                                {"glm_moe_dsa", "tiny-glm-dsa"}};

// How the ranks split the model: attention always by heads; the experts each split over the
// ranks (TP) or whole, num_experts / ranks each (EP, --enable-expert-parallel).
struct Layout {
  int ranks = 1;
  bool expert_parallel = false;
  std::string name() const { return (expert_parallel ? "ep " : "tp ") + std::to_string(ranks); }
};
const Layout kLayouts[] = {{2, false}, {4, false}, {2, true}, {4, true}};

ModelWeights make_weights(const Family& f) { return testing::tiny_weights(f, 3); }

// The prompt's logits [12, vocab], one [1, vocab] per decode step, and the greedy tokens.
struct GreedyRun {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
  std::string error;
};

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

template <typename Forward>
GreedyRun greedy_run(int64_t vocab, Forward forward) {
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < kPromptTokens; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 11) % vocab));
  GreedyRun run;
  run.logits.push_back(forward(std::span<const int32_t>(prompt), true));
  run.tokens.push_back(argmax(std::vector<float>(run.logits[0].end() - vocab, run.logits[0].end())));
  for (int64_t step = 0; step < kDecodeSteps; ++step) {
    run.logits.push_back(forward(std::span<const int32_t>(&run.tokens.back(), 1), false));
    run.tokens.push_back(argmax(run.logits.back()));
  }
  return run;
}

double relative_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / scale;
}

std::vector<GreedyRun> rank_runs(const ModelWeights& full, const Layout& layout, MlaAttentionForm form) {
  dist::CpuWorld world(layout.ranks);
  std::vector<GreedyRun> runs(static_cast<size_t>(layout.ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < layout.ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::CpuCommunicator group(world, r);
        TpDenseModel model(full, group, layout.expert_parallel);
        SequenceKvCache cache(model.config(), kPromptTokens + kDecodeSteps + 1, form);
        runs[static_cast<size_t>(r)] = greedy_run(full.config.vocab_size, [&](std::span<const int32_t> t, bool all) {
          return model.forward(t, cache, all);
        });
      } catch (const std::exception& e) {
        runs[static_cast<size_t>(r)].error = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return runs;
}

void expect_ranks_match(const ModelWeights& full, MlaAttentionForm form) {
  const DenseModel reference_model{ModelWeights(full)};
  SequenceKvCache reference_cache(full.config, kPromptTokens + kDecodeSteps + 1, form);
  const GreedyRun reference = greedy_run(full.config.vocab_size, [&](std::span<const int32_t> t, bool all) {
    return reference_model.forward(t, reference_cache, all);
  });
  for (const Layout& layout : kLayouts) {
    SCOPED_TRACE(layout.name());
    const std::vector<GreedyRun> runs = rank_runs(full, layout, form);
    for (int r = 0; r < layout.ranks; ++r) {
      const GreedyRun& run = runs[static_cast<size_t>(r)];
      ASSERT_EQ(run.error, "") << "rank " << r;
      EXPECT_EQ(run.tokens, reference.tokens) << "rank " << r;
      ASSERT_EQ(run.logits.size(), reference.logits.size());
      for (size_t step = 0; step < run.logits.size(); ++step) {
        ASSERT_EQ(run.logits[step].size(), reference.logits[step].size());
        EXPECT_LE(relative_diff(run.logits[step], reference.logits[step]), kLogitTolerance)
            << "rank " << r << " step " << step;
        EXPECT_EQ(std::memcmp(run.logits[step].data(), runs[0].logits[step].data(),
                              run.logits[step].size() * sizeof(float)),
                  0)
            << "rank " << r << " differs from rank 0 at step " << step;
      }
    }
  }
}

TEST(TpFamilies, LogitsAndGreedyTokensMatchOneRank) {
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.preset);
    expect_ranks_match(make_weights(f), MlaAttentionForm::kAbsorbed);
  }
}

// Latent attention cached decompressed (per-head K/V): each rank caches its own heads' keys and
// values, the one form where TP does divide an MLA model's cache.
TEST(TpFamilies, DecompressedLatentAttentionMatchesOneRank) {
  expect_ranks_match(make_weights({"deepseek_v3", "tiny-deepseek"}), MlaAttentionForm::kDecompressed);
}

// Expert parallelism is reproducible: its combine adds each token's expert outputs in expert
// order (model/expert_dispatch.h), so two runs give the same bits (and every rank the same bits,
// checked above).
TEST(TpFamilies, ExpertParallelRunsAreBitIdentical) {
  const ModelWeights full = make_weights({"deepseek_v3", "tiny-deepseek"});
  const Layout ep4{4, true};
  const std::vector<GreedyRun> first = rank_runs(full, ep4, MlaAttentionForm::kAbsorbed);
  const std::vector<GreedyRun> second = rank_runs(full, ep4, MlaAttentionForm::kAbsorbed);
  ASSERT_EQ(first[0].error, "");
  ASSERT_EQ(second[0].error, "");
  for (size_t step = 0; step < first[0].logits.size(); ++step) {
    EXPECT_EQ(std::memcmp(first[0].logits[step].data(), second[0].logits[step].data(),
                          first[0].logits[step].size() * sizeof(float)),
              0)
        << "step " << step;
  }
}

TEST(TpFamilies, ShardsHoldWholeExpertsUnderEpAndSlicesUnderTp) {
  const ModelWeights full = make_weights({"deepseek_v3", "tiny-deepseek"});  // 16 experts of 32, 4 heads
  const ModelConfig& c = full.config;
  const int64_t expert_values = 2 * c.moe_intermediate_size * c.hidden_size;  // one expert's [gate; up]
  const LayerWeights& moe_layer = full.layers[1];
  for (int r = 0; r < 4; ++r) {
    const TpShard ep = shard_weights(full, r, 4, true);
    EXPECT_EQ(ep.expert_begin, r * 4);
    EXPECT_EQ(ep.expert_count, 4);
    EXPECT_EQ(ep.weights.config.moe_intermediate_size, 32);
    EXPECT_EQ(ep.weights.config.num_experts, 16);  // the router still scores every expert
    const LayerWeights& s = ep.weights.layers[1];
    ASSERT_EQ(s.experts_gate_up.size(), static_cast<size_t>(4 * expert_values));
    EXPECT_TRUE(std::equal(s.experts_gate_up.begin(), s.experts_gate_up.end(),
                           moe_layer.experts_gate_up.begin() + r * 4 * expert_values));
    EXPECT_EQ(s.shared_gate_up, moe_layer.shared_gate_up);  // replicated
    EXPECT_EQ(s.router, moe_layer.router);
    EXPECT_EQ(s.q_a_proj, moe_layer.q_a_proj);  // the latent's projections are every head's
    EXPECT_EQ(s.kv_b_proj.size(), moe_layer.kv_b_proj.size() / 4);  // one head of four

    const TpShard tp = shard_weights(full, r, 4);
    EXPECT_EQ(tp.expert_count, 0);
    EXPECT_EQ(tp.weights.config.moe_intermediate_size, 8);
    EXPECT_EQ(tp.weights.layers[1].experts_gate_up.size(), moe_layer.experts_gate_up.size() / 4);
  }
}

std::string tp_error(const ModelConfig& config, int tp, bool expert_parallel) {
  try {
    check_tp_size(config, tp, expert_parallel);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TpFamilies, SizesThatDoNotDivideAreRefusedByName) {
  const ModelConfig mixtral = make_model_config({.arch = "mixtral", .preset = "tiny-mixtral"});  // 8 experts
  ModelConfig c = mixtral;
  c.num_experts = 6;
  EXPECT_NE(tp_error(c, 4, true).find("expert parallel size 4 does not divide num_experts 6"), std::string::npos)
      << tp_error(c, 4, true);
  EXPECT_NE(tp_error(mixtral, 1, true).find("with --tp 1 there is one rank"), std::string::npos);
  const ModelConfig dense = make_model_config({.arch = "llama", .preset = "tiny"});
  EXPECT_NE(tp_error(dense, 2, true).find("no mixture-of-experts layer"), std::string::npos);
  EXPECT_NE(tp_error(mixtral, 3, false).find("does not divide num_attention_heads 4"), std::string::npos);
  // The GPU's TP runner refuses sizes that do not divide as check_tp_size does, with and without EP.
  const ModelConfig gpu_mixtral = make_model_config({.arch = "mixtral", .preset = "tiny-gpu-mixtral"});
  EXPECT_NE(cuda_tp_unsupported_reason(gpu_mixtral, 3).find("does not divide num_attention_heads 4"), std::string::npos);
  EXPECT_EQ(cuda_tp_unsupported_reason(gpu_mixtral, 2), "");
  EXPECT_EQ(cuda_tp_unsupported_reason(gpu_mixtral, 2, true), "");
  EXPECT_NE(cuda_tp_unsupported_reason(gpu_mixtral, 1, true).find("with --tp 1 there is one rank"), std::string::npos);
  ModelConfig six = gpu_mixtral;
  six.num_experts = 6;
  EXPECT_NE(cuda_tp_unsupported_reason(six, 4, true).find("does not divide num_experts 6"), std::string::npos);
  EXPECT_EQ(cuda_tp_unsupported_reason(make_model_config({.arch = "llama", .preset = "tiny-gpu"}), 2), "");
}

// ---------------------------------------------------------------------------------------------
// Through the engine.

core::EngineConfig engine_config() {
  core::EngineConfig c;
  c.scheduler.max_num_batched_tokens = 16;  // prompts of up to 23 tokens are chunked
  c.scheduler.max_model_len = 128;
  c.num_blocks = 64;
  c.block_size = 4;
  return c;
}

std::vector<std::vector<int32_t>> run_engine(std::unique_ptr<runner::ModelRunner> runner, int64_t vocab) {
  engine::EngineCore engine(engine_config(), std::move(runner));
  core::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 10;
  params.ignore_eos = true;
  std::vector<std::shared_ptr<engine::OutputChannel>> channels;
  for (int length : {3, 23, 9, 17, 1}) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < length; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + length * 101 + 11) % vocab));
    channels.push_back(std::make_shared<engine::OutputChannel>());
    engine.submit(prompt, params, channels.back());
  }
  return testing::run_engine_to_idle(engine, channels, 10000);
}

TEST(TpFamilies, EngineGreedyTokensMatchOneRank) {
  const core::EngineConfig c = engine_config();
  for (const Family& f : kFamilies) {
    SCOPED_TRACE(f.preset);
    const ModelWeights weights = make_weights(f);
    const int64_t vocab = weights.config.vocab_size;
    const auto reference = run_engine(
        std::make_unique<runner::CpuModelRunner>(std::make_unique<DenseModel>(weights), c.num_blocks, c.block_size),
        vocab);
    for (const auto& tokens : reference) ASSERT_EQ(tokens.size(), 10u);
    for (const Layout& layout : kLayouts) {
      auto runner = std::make_unique<runner::TpCpuModelRunner>(weights, layout.ranks, c.num_blocks, c.block_size,
                                                               layout.expert_parallel);
      EXPECT_EQ(run_engine(std::move(runner), vocab), reference) << layout.name();
    }
  }
}

}  // namespace
}  // namespace tachyon::model
