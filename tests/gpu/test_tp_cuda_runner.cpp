// Tensor parallelism on the CUDA runner, on a one-GPU machine: TP = 1 through NCCL (a group of
// one: the production path, collectives and the logits gather included), and TP = 2 and 4 with
// the ranks sharing the GPU over the peer-access communicator (NCCL refuses two ranks on one
// device). Each against the f32 reference over the same schedule as the single-GPU runner test
// (prefill chunks, a cached prefix, graph-replayed decodes); every rank must end with the same
// logits bit for bit (they are one gather); and the engine must run on the TP runner.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>

#include "runner_test_util.h"
#include "tachyon/dist/cuda/peer_communicator.h"
#include "tachyon/runner/cuda/tp_cuda_model_runner.h"

namespace tachyon::runner {
namespace {

// Before main(), so before CUDA reads it: enough hardware queues that the ranks' streams on one
// GPU never queue behind a peer's spinning collective kernel.
[[maybe_unused]] const bool kEnoughQueues = [] {
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1);
  return true;
}();

struct TpCase {
  Variant variant;
  int tp = 1;
};

// TP = 1: NCCL on device 0. TP > 1: every rank on device 0, over peer memory.
struct TpSetup {
  std::vector<int> devices;
  std::shared_ptr<dist::PeerWorld> world;  // outlives the runner's communicators
  TpCommFactory factory;
};

TpSetup tp_setup(int tp) {
  TpSetup setup;
  setup.devices.assign(static_cast<size_t>(tp), 0);
  if (tp == 1) {
    setup.factory = default_tp_comm_factory(setup.devices);
  } else {
    // A 30 s hang timeout turns a protocol bug into a failed test instead of a hung one.
    setup.world = std::make_shared<dist::PeerWorld>(setup.devices, size_t{8} << 20, /*hang_timeout_s=*/30.0);
    auto world = setup.world;
    setup.factory = [world](int rank) { return std::make_unique<dist::PeerCommunicator>(*world, rank, nullptr); };
  }
  return setup;
}

engine::EngineConfig tp_config(int tp, bool eager) {
  engine::EngineConfig config = small_config(eager);
  config.device.tensor_parallel_size = tp;
  config.num_blocks = 256;  // ranks sharing one GPU get an explicit KV cache size
  return config;
}

class TpCudaRunner : public ::testing::TestWithParam<TpCase> {};

TEST_P(TpCudaRunner, LogitsMatchTheReferenceAndEveryRankHoldsTheSame) {
  const TpCase& c = GetParam();
  const fs::path dir = make_tiny(c.variant);
  const engine::EngineConfig config = tp_config(c.tp, /*eager=*/false);
  model::SafetensorsCheckpoint checkpoint(dir);
  TpSetup setup = tp_setup(c.tp);
  TpCudaModelRunner gpu(model::load_weights_bf16(model::ModelConfig::from_dir(dir), checkpoint), config,
                        setup.devices, setup.factory);
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
    engine::EngineConfig config = tp_config(c.tp, eager);
    TpSetup setup = tp_setup(c.tp);
    auto runner = std::make_unique<TpCudaModelRunner>(weights, config, setup.devices, setup.factory);
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
