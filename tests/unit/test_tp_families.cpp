// The MoE, latent-attention and sparse-attention families across CPU thread ranks, against the
// one-rank reference (DenseModel, CpuModelRunner):
//   model  every rank's logits over a 12-token prompt and 8 greedy decode steps are within 1e-5
//          of the logit scale of the reference's (the ranks' partial sums add in another order,
//          so not bit-exact), bit-identical on every rank, and the greedy tokens are the same;
//   engine EngineCore over TpCpuModelRunner gives five prompts (continuous batching, chunked
//          prefill) the reference runner's greedy tokens.
// For TP 2 and 4 on tiny Qwen3-MoE, Mixtral, DeepSeek-V3 (with and without q LoRA),
// DeepSeek-V3.2 (DSA) and GLM-5 (DSA with shared layers).
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

struct Family {
  const char* arch;
  const char* preset;
};
constexpr Family kFamilies[] = {{"qwen3_moe", "tiny-moe"},          {"qwen3_moe", "tiny-moe-nonorm"},
                                {"mixtral", "tiny-mixtral"},        {"deepseek_v3", "tiny-deepseek"},
                                {"deepseek_v3", "tiny-deepseek-noqlora"}, {"deepseek_v32", "tiny-dsa"},
                                {"glm_moe_dsa", "tiny-glm-dsa"}};

// How the ranks split the model.
struct Layout {
  int ranks = 1;
  std::string name() const { return "tp " + std::to_string(ranks); }
};
const Layout kLayouts[] = {{2}, {4}};

ModelWeights make_weights(const Family& f) {
  auto dir = std::filesystem::temp_directory_path() /
             ("tachyon-tp-families-" + std::to_string(::getpid()) + "-" + f.preset);
  make_model({.arch = f.arch, .preset = f.preset, .seed = 3, .out_dir = dir});
  ModelWeights weights = load_weights(ModelConfig::from_dir(dir), SafetensorsCheckpoint(dir));
  std::filesystem::remove_all(dir);
  return weights;
}

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
        TpDenseModel model(full, group);
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
      auto runner = std::make_unique<runner::TpCpuModelRunner>(weights, layout.ranks, c.num_blocks, c.block_size);
      EXPECT_EQ(run_engine(std::move(runner), vocab), reference) << layout.name();
    }
  }
}

}  // namespace
}  // namespace tachyon::model
