// EngineCore with the tensor-parallel CPU runner (TpCpuModelRunner, thread ranks) against the
// plain CpuModelRunner: several prompts submitted at once (continuous batching, chunked prefill
// under a small token budget, greedy, ignore_eos, 12 tokens each) give identical tokens at
// tp = 2 and 4 on the tiny qwen3 and llama tiny-mqa (one kv head, replicated) presets. Also: the
// runner refuses a tp that does not divide the model, and stops its workers cleanly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../engine_run.h"
#include "tachyon/base/check.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/runner/cpu_model_runner.h"
#include "tachyon/runner/tp_cpu_model_runner.h"

namespace tachyon::engine {
using namespace tachyon::core;
namespace {

model::ModelWeights make_weights(const std::string& arch, const std::string& preset) {
  auto dir = std::filesystem::temp_directory_path() /
             ("tachyon-tp-engine-" + std::to_string(::getpid()) + "-" + arch + "-" + preset);
  model::make_model({.arch = arch, .preset = preset, .seed = 5, .out_dir = dir});
  model::ModelConfig config = model::ModelConfig::from_dir(dir);
  model::ModelWeights weights = model::load_weights(config, model::SafetensorsCheckpoint(dir));
  std::filesystem::remove_all(dir);
  return weights;
}

EngineConfig engine_config() {
  EngineConfig c;
  c.scheduler.max_num_batched_tokens = 16;  // prompts of up to 23 tokens are chunked
  c.scheduler.max_model_len = 128;
  c.num_blocks = 64;
  c.block_size = 4;
  return c;
}

// Submits the prompts at once and steps the engine until idle; each prompt's 12 greedy tokens.
std::vector<std::vector<int32_t>> run_engine(std::unique_ptr<runner::ModelRunner> runner, int64_t vocab) {
  EngineCore engine(engine_config(), std::move(runner));
  SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = 12;
  params.ignore_eos = true;
  std::vector<std::shared_ptr<OutputChannel>> channels;
  const int lengths[] = {3, 23, 9, 17, 1};
  for (int p = 0; p < 5; ++p) {
    std::vector<int32_t> prompt;
    for (int i = 0; i < lengths[p]; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + p * 101 + 11) % vocab));
    channels.push_back(std::make_shared<OutputChannel>());
    engine.submit(prompt, params, channels.back());
  }
  return testing::run_engine_to_idle(engine, channels, 10000);
}

void expect_tp_matches(const std::string& arch, const std::string& preset) {
  model::ModelWeights weights = make_weights(arch, preset);
  const EngineConfig c = engine_config();
  const int64_t vocab = weights.config.vocab_size;
  auto reference = run_engine(
      std::make_unique<runner::CpuModelRunner>(std::make_unique<model::DenseModel>(weights), c.num_blocks, c.block_size),
      vocab);
  for (const auto& tokens : reference) ASSERT_EQ(tokens.size(), 12u);
  for (int tp : {2, 4}) {
    auto tokens = run_engine(std::make_unique<runner::TpCpuModelRunner>(weights, tp, c.num_blocks, c.block_size), vocab);
    EXPECT_EQ(tokens, reference) << arch << " " << preset << " tp " << tp;
  }
}

TEST(TpEngine, Qwen3TinyMatchesTp1) { expect_tp_matches("qwen3", "tiny"); }

TEST(TpEngine, LlamaTinyMqaMatchesTp1) { expect_tp_matches("llama", "tiny-mqa"); }

TEST(TpEngine, RefusesATpThatDoesNotDivideTheModel) {
  model::ModelWeights weights = make_weights("qwen3", "tiny");
  try {
    runner::TpCpuModelRunner runner(weights, 3, 16, 4);
    FAIL() << "tp 3 on 4 heads was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor parallel size 3 does not divide"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tachyon::engine
