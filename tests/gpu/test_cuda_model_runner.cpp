// The CUDA runner against the CPU reference, on random-weight tiny models of every
// architecture in the GPU's tiny shapes: the same hand-made StepPlans (a mixed prefill step with
// chunking and a prefix of cached blocks, then decode steps) through both; logits within bf16
// tolerance. Then through the engine: graphs vs eager, asynchronous scheduling (step n+1's
// decode inputs resolved on the device from step n's samples, inside the graphs) vs the
// synchronous loop, and one request alone vs in a busy batch, must give identical tokens.
#include <algorithm>
#include <filesystem>
#include <numeric>

#include "runner_test_util.h"

namespace tachyon::runner {
namespace {

class CudaRunnerVsCpu : public ::testing::TestWithParam<Variant> {};

TEST_P(CudaRunnerVsCpu, LogitsMatchTheReferenceOverPrefillChunksAndDecodes) {
  const fs::path dir = make_tiny(GetParam());
  const core::EngineConfig config = small_config(/*eager=*/false);
  model::SafetensorsCheckpoint checkpoint(dir);
  CudaModelRunner gpu(model::load_weights_bf16(model::ModelConfig::from_dir(dir), checkpoint), config);
  expect_logits_match_reference(dir, config.block_size, gpu, [&](int32_t rows) { return gpu.last_logits(rows); });
  EXPECT_GT(gpu.graph_replays(), 0) << "decode steps of batch 3 should replay the graph of batch 4";
}

TEST_P(CudaRunnerVsCpu, GraphsAndEagerAndBatchCompanyGiveIdenticalTokens) {
  const fs::path dir = make_tiny(GetParam());
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  model::SafetensorsCheckpoint checkpoint(dir);
  const model::Bf16ModelWeights weights = model::load_weights_bf16(mc, checkpoint);
  auto gen = gpu_test::rng(12);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(mc.vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t length : {9, 30, 3, 64, 17}) {
    prompts.emplace_back(static_cast<size_t>(length));
    for (int32_t& t : prompts.back()) t = token(gen);
  }
  auto run = [&](bool eager, const std::vector<std::vector<int32_t>>& batch,
                 core::AsyncScheduling async = core::AsyncScheduling::kAuto) {
    core::EngineConfig config = small_config(eager);
    config.device.async_scheduling = async;
    auto runner = std::make_unique<CudaModelRunner>(weights, config);
    config.num_blocks = runner->num_blocks();
    engine::EngineCore engine(config, std::move(runner));
    EXPECT_EQ(engine.async_scheduling(), async != core::AsyncScheduling::kOff) << "auto is on for the CUDA runner";
    return generate(engine, batch, 24);
  };
  const auto graphs = run(false, prompts);
  const auto eager = run(true, prompts);
  EXPECT_EQ(graphs, eager) << "CUDA graph replays and eager steps must give the same tokens";
  EXPECT_EQ(run(false, prompts, core::AsyncScheduling::kOff), graphs)
      << "asynchronous scheduling must give the synchronous loop's tokens (graphs)";
  EXPECT_EQ(run(true, prompts, core::AsyncScheduling::kOff), eager)
      << "asynchronous scheduling must give the synchronous loop's tokens (eager)";
  const auto alone = run(false, {prompts[1]});
  EXPECT_EQ(alone[0], graphs[1]) << "a request's tokens must not depend on its batch company";
}

INSTANTIATE_TEST_SUITE_P(Architectures, CudaRunnerVsCpu,
                         ::testing::Values(Variant{"qwen3", "tiny-gpu"}, Variant{"llama", "tiny-gpu"},
                                           Variant{"qwen2", "tiny-gpu-mqa"}, Variant{"mistral", "tiny-gpu-window"},
                                           Variant{"llama", "tiny-gpu-bias"}, Variant{"qwen3_moe", "tiny-gpu-moe-all"},
                                           Variant{"deepseek_v3", "tiny-gpu-deepseek-all"},
                                           Variant{"deepseek_v32", "tiny-gpu-dsa-all"},
                                           Variant{"glm_moe_dsa", "tiny-gpu-glm-all"},
                                           Variant{"mixtral", "tiny-gpu-mixtral-all"}),
                         [](const auto& info) {
                           std::string name = info.param.arch + "_" + info.param.preset;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace tachyon::runner
