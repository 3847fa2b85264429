// Tensor parallelism on the CUDA runner, through the production path: rank r on GPU r, NCCL
// fronted by the peer-access communicator where the GPUs reach each other (default_tp_comm_factory).
// TP = 1 (a one-rank NCCL group: collectives and the logits gather included) runs everywhere;
// TP = 2 and 4 need that many GPUs and are skipped, saying so, on a machine with fewer. Ranks
// cannot share a GPU: a peer kernel waiting for a rank whose kernel queues behind it never ends.
// Each case runs the single-GPU runner test's schedule (prefill chunks, a cached prefix, graph-
// replayed decodes) against the f32 reference; every rank must end with the same logits bit for
// bit (they are one gather); and the engine must give the same tokens with graphs and eager.
#include <algorithm>
#include <memory>
#include <string>

#include "runner_test_util.h"
#include "tachyon/tensor/cuda/device_buffer.h"
#include "tachyon/runner/cuda/tp_cuda_model_runner.h"

namespace tachyon::runner {
namespace {

struct TpCase {
  Variant variant;
  int tp = 1;
};

std::vector<int> tp_devices(int tp) {
  std::vector<int> devices(static_cast<size_t>(tp));
  for (int r = 0; r < tp; ++r) devices[static_cast<size_t>(r)] = r;
  return devices;
}

core::EngineConfig tp_config(int tp, bool eager) {
  core::EngineConfig config = small_config(eager);
  config.device.tensor_parallel_size = tp;
  return config;
}

class TpCudaRunner : public ::testing::TestWithParam<TpCase> {};

TEST_P(TpCudaRunner, LogitsMatchTheReferenceAndEveryRankHoldsTheSame) {
  const TpCase& c = GetParam();
  if (cuda::cuda_device_count() < c.tp) {
    GTEST_SKIP() << "TP = " << c.tp << " needs " << c.tp << " GPUs, this machine has " << cuda::cuda_device_count();
  }
  const fs::path dir = make_tiny(c.variant);
  const core::EngineConfig config = tp_config(c.tp, /*eager=*/false);
  model::SafetensorsCheckpoint checkpoint(dir);
  const std::vector<int> devices = tp_devices(c.tp);
  TpCudaModelRunner gpu(model::load_weights_bf16(model::ModelConfig::from_dir(dir), checkpoint), config,
                        TpCudaLayout{.devices = devices}, default_tp_comm_factory(devices));
  ASSERT_EQ(gpu.tp_size(), c.tp);
  expect_logits_match_reference(dir, config.block_size, gpu, [&](int32_t rows) {
    const std::vector<float> rank0 = gpu.rank_runner(0).last_logits(rows);
    for (int r = 1; r < c.tp; ++r) {
      EXPECT_TRUE(gpu.rank_runner(r).last_logits(rows) == rank0) << "rank " << r << " gathered other logits";
    }
    return rank0;
  });
  for (int r = 0; r < c.tp; ++r) {
    EXPECT_GT(gpu.rank_runner(r).graph_replays(), 0) << "rank " << r << ": decodes should replay graphs";
  }
}

TEST_P(TpCudaRunner, TheEngineGeneratesTheSameTokensWithGraphsAndEager) {
  const TpCase& c = GetParam();
  if (cuda::cuda_device_count() < c.tp) {
    GTEST_SKIP() << "TP = " << c.tp << " needs " << c.tp << " GPUs, this machine has " << cuda::cuda_device_count();
  }
  const fs::path dir = make_tiny(c.variant);
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  model::SafetensorsCheckpoint checkpoint(dir);
  const model::Bf16ModelWeights weights = model::load_weights_bf16(mc, checkpoint);
  auto gen = gpu_test::rng(13);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(mc.vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t length : {9, 30, 3, 64}) {
    prompts.emplace_back(static_cast<size_t>(length));
    for (int32_t& t : prompts.back()) t = token(gen);
  }
  auto run = [&](bool eager) {
    core::EngineConfig config = tp_config(c.tp, eager);
    const std::vector<int> devices = tp_devices(c.tp);
    auto runner = std::make_unique<TpCudaModelRunner>(weights, config, TpCudaLayout{.devices = devices},
                                                      default_tp_comm_factory(devices));
    config.num_blocks = runner->num_blocks();
    engine::EngineCore engine(config, std::move(runner));
    return generate(engine, prompts, 16);
  };
  const auto graphs = run(false);
  const auto eager = run(true);
  for (const auto& tokens : graphs) EXPECT_EQ(tokens.size(), 16u);
  EXPECT_EQ(graphs, eager) << "graph replays and eager steps of the TP runner must give the same tokens";
}

INSTANTIATE_TEST_SUITE_P(Shapes, TpCudaRunner,
                         ::testing::Values(TpCase{{"qwen3", "tiny-gpu"}, 1}, TpCase{{"qwen3", "tiny-gpu"}, 2},
                                           TpCase{{"qwen3", "tiny-gpu"}, 4}, TpCase{{"qwen2", "tiny-gpu-mqa"}, 2},
                                           TpCase{{"llama", "tiny-gpu-bias"}, 2},
                                           TpCase{{"llama", "tiny-gpu-bias"}, 4}),
                         [](const auto& info) {
                           std::string name = info.param.variant.arch + "_" + info.param.variant.preset + "_tp" +
                                              std::to_string(info.param.tp);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

}  // namespace
}  // namespace tachyon::runner
