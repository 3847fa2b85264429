// Data-parallel attention on GPUs (runner/cuda/dp_cuda_model_runner.h): D whole-model ranks on
// GPU 0 through the host-staged communicator (shared_gpu_tp_comms), each running its own
// sequences with its own cache and its window of the experts; every MoE layer serves every
// rank's rows (model/gpu/moe_mlp.h).
// SharedGpuDpRunner:
//   - along the single-GPU runner's greedy path: the prompts placed on the ranks by their blocks
//     (sequence i in rank i % D's pool; with fewer prompts than ranks some ranks are idle and only
//     serve experts), prefilled in one step, then 16 decode steps teacher-forced with the single
//     runner's argmax. The ranks' partial sums add in bf16, so the two are not bit-equal: every
//     row's logits within the reference tolerance of the single runner's and the same argmax on
//     at least 90% of the rows. A rank adding another rank's experts, or none, or its rows put
//     back in the wrong place, lands far outside both.
//   - through the engine: greedy tokens the same in two runs, and the engine's placement puts
//     sequences on every rank.
// The `separate` cases put rank d on GPU d over NCCL (fronted by the peer-access communicator where
// the GPUs reach each other), the production layout; skipped, saying so, on fewer GPUs. The CLI
// refuses --dp on GPUs until they have passed on such a machine (runner_factory.cpp).
#include <algorithm>
#include <numeric>
#include <memory>
#include <string>

#include "runner_test_util.h"
#include "tachyon/runner/cuda/dp_cuda_model_runner.h"

namespace tachyon::runner {
namespace {

struct DpCase {
  Variant variant;
  int dp = 2;
  int prompts = 4;  // fewer than dp: the other ranks only serve experts
  bool separate = false;  // rank d on GPU d (NCCL) instead of every rank on GPU 0 (host-staged)
};

core::EngineConfig dp_config(int dp) {
  core::EngineConfig config = small_config(/*eager=*/true);
  config.device.data_parallel_size = dp;
  config.device.kv_cache_memory_bytes = int64_t{64} << 20;
  return config;
}

// On GPU 0 through the host-staged communicator, or (separate) rank d on GPU d.
std::unique_ptr<DpCudaModelRunner> dp_runner(const model::Bf16ModelWeights& weights, const core::EngineConfig& config,
                                             int dp, bool separate) {
  std::vector<int> devices(static_cast<size_t>(dp), 0);
  if (separate) std::iota(devices.begin(), devices.end(), 0);
  SharedGpuTpComms comms = separate ? SharedGpuTpComms{default_tp_comm_factory(devices), {}} : shared_gpu_tp_comms(dp);
  return std::make_unique<DpCudaModelRunner>(weights, config,
                                             TpCudaLayout{.devices = devices, .ranks_share_gpu = !separate},
                                             std::move(comms.make_comm), std::move(comms.on_failure));
}

#define SKIP_WITHOUT_GPUS(c)                                                                              \
  if ((c).separate && cuda::cuda_device_count() < (c).dp) {                                              \
    GTEST_SKIP() << "DP " << (c).dp << " on separate GPUs needs " << (c).dp << " GPUs, this machine has " \
                 << cuda::cuda_device_count();                                                            \
  }

// Each sequence's blocks, enough for its prompt and 17 more tokens: in rank (i % dp)'s pool of
// `pool_blocks` for the group, one after another for the single runner.
void give_blocks(std::vector<PlanSequence>& seqs, int dp, int32_t pool_blocks, int32_t block_size) {
  std::vector<int32_t> used(static_cast<size_t>(dp), 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int rank = static_cast<int>(i) % dp;
    const int32_t count = static_cast<int32_t>((seqs[i].tokens.size() + 17 + block_size - 1) / block_size);
    ASSERT_LE(used[static_cast<size_t>(rank)] + count, pool_blocks) << "the test's sequences outgrow a rank's cache";
    for (int32_t j = 0; j < count; ++j) {
      seqs[i].blocks.push_back(rank * pool_blocks + used[static_cast<size_t>(rank)]++);
    }
  }
}

std::string dp_case_name(const ::testing::TestParamInfo<DpCase>& info) {
  std::string name = info.param.variant.arch + "_" + info.param.variant.preset + "_dp" +
                     std::to_string(info.param.dp) + "_" + std::to_string(info.param.prompts) + "prompts" +
                     (info.param.separate ? "_separate_gpus" : "");
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

class SharedGpuDpRunner : public ::testing::TestWithParam<DpCase> {};

TEST_P(SharedGpuDpRunner, GreedyPathFollowsTheSingleGpuRunner) {
  const DpCase& c = GetParam();
  SKIP_WITHOUT_GPUS(c);
  const fs::path dir = make_tiny(c.variant);
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  model::SafetensorsCheckpoint checkpoint(dir);
  const model::Bf16ModelWeights weights = model::load_weights_bf16(mc, checkpoint);
  // Prefilled in one step: at most max_num_batched_tokens (128) together.
  const std::vector<int64_t> lengths = {9, 30, 3, 40, 17, 21};
  const std::vector<std::vector<int32_t>> prompts =
      random_prompts(mc, std::vector<int64_t>(lengths.begin(), lengths.begin() + c.prompts), 19);
  const core::EngineConfig config = dp_config(c.dp);
  core::EngineConfig single_config = small_config(/*eager=*/true);
  single_config.device.kv_cache_memory_bytes = config.device.kv_cache_memory_bytes;
  CudaModelRunner single(weights, single_config);
  const auto group = dp_runner(weights, config, c.dp, c.separate);
  ASSERT_EQ(group->dp_size(), c.dp);

  std::vector<PlanSequence> grouped(prompts.size()), alone(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) grouped[i].tokens = alone[i].tokens = prompts[i];
  give_blocks(grouped, c.dp, group->num_blocks(), config.block_size);
  give_blocks(alone, 1, single.num_blocks(), config.block_size);
  core::SamplingParams greedy;
  greedy.temperature = 0.0f;
  int32_t unused = 0;
  double worst = 0.0;
  int rows = 0, agree = 0;
  const size_t V = static_cast<size_t>(mc.vocab_size);
  for (int step = 0; step < 17; ++step) {
    std::vector<int64_t> run;
    for (const PlanSequence& s : alone) run.push_back(step == 0 ? static_cast<int64_t>(s.tokens.size()) : 1);
    const core::StepPlan grouped_plan = make_plan(grouped, run, config.block_size, unused, greedy);
    const core::StepPlan alone_plan = make_plan(alone, run, config.block_size, unused, greedy);
    group->execute(grouped_plan);
    single.execute(alone_plan);
    const int32_t n = static_cast<int32_t>(alone_plan.logits_rows.size());
    ASSERT_EQ(n, static_cast<int32_t>(prompts.size()));
    const std::vector<float> expected = single.last_logits(n), got = group->last_logits(n);
    const double error = gpu_test::relative_error(got, expected);
    worst = std::max(worst, error);
    EXPECT_LT(error, logits_tolerance(mc)) << "step " << step;
    for (size_t r = 0; r < prompts.size(); ++r) {
      auto argmax = [&](const std::vector<float>& logits) {
        const auto row = logits.begin() + static_cast<std::ptrdiff_t>(r * V);
        return static_cast<int32_t>(std::max_element(row, row + static_cast<std::ptrdiff_t>(V)) - row);
      };
      const int32_t choice = argmax(expected);
      ++rows;
      agree += argmax(got) == choice ? 1 : 0;
      grouped[r].tokens.push_back(choice);
      alone[r].tokens.push_back(choice);
    }
  }
  std::printf("[dp %d vs 1 GPU] %-32s %d prompts: worst logits rel. error %.2e, argmax agrees on %d of %d rows\n",
              c.dp, c.variant.preset.c_str(), c.prompts, worst, agree, rows);
  EXPECT_GE(agree * 10, rows * 9) << "the group's greedy choice differs from the single runner's on " << rows - agree
                                  << " of " << rows << " rows";
  for (int d = 0; d < c.dp; ++d) {
    const int64_t expected = d < c.prompts ? (c.prompts - d + c.dp - 1) / c.dp : 0;  // sequences d, d + dp, ...
    EXPECT_EQ(group->placement().placed()[static_cast<size_t>(d)], expected)
        << "rank " << d << " started another number of sequences";
  }
}

TEST_P(SharedGpuDpRunner, TheEngineServesItAlikeOnEveryRank) {
  const DpCase& c = GetParam();
  SKIP_WITHOUT_GPUS(c);
  if (c.prompts < c.dp) GTEST_SKIP() << "the engine case needs a prompt per rank";
  const fs::path dir = make_tiny(c.variant);
  const model::ModelConfig mc = model::ModelConfig::from_dir(dir);
  model::SafetensorsCheckpoint checkpoint(dir);
  const model::Bf16ModelWeights weights = model::load_weights_bf16(mc, checkpoint);
  const std::vector<std::vector<int32_t>> prompts = random_prompts(mc, {9, 30, 3, 64, 17, 41, 5, 22}, 23);
  const core::EngineConfig config = dp_config(c.dp);
  auto serve = [&] {
    core::EngineConfig engine_config = config;
    auto runner = dp_runner(weights, config, c.dp, c.separate);
    const DpCudaModelRunner* group = runner.get();
    engine_config.num_blocks = runner->num_blocks();
    engine::EngineCore engine(engine_config, std::move(runner));
    const auto tokens = generate(engine, prompts, 12);
    for (int d = 0; d < c.dp; ++d) {
      EXPECT_GT(group->placement().placed()[static_cast<size_t>(d)], 0) << "rank " << d << " ran no sequence";
    }
    return tokens;
  };
  const auto first = serve();
  for (const auto& tokens : first) EXPECT_EQ(tokens.size(), 12u);
  EXPECT_EQ(serve(), first) << "two runs through the engine must give the same tokens";
}

INSTANTIATE_TEST_SUITE_P(Families, SharedGpuDpRunner,
                         ::testing::Values(DpCase{{"deepseek_v3", "tiny-gpu-deepseek-all"}, 2, 4},
                                           DpCase{{"deepseek_v3", "tiny-gpu-deepseek-all"}, 4, 4},
                                           DpCase{{"deepseek_v3", "tiny-gpu-deepseek-all"}, 2, 1},
                                           DpCase{{"deepseek_v3", "tiny-gpu-deepseek-all"}, 4, 6},
                                           DpCase{{"qwen3_moe", "tiny-gpu-moe-all"}, 2, 4},
                                           DpCase{{"mixtral", "tiny-gpu-mixtral-all"}, 2, 3},
                                           DpCase{{"glm_moe_dsa", "tiny-gpu-glm-all"}, 2, 4},
                                           DpCase{{"deepseek_v3", "tiny-gpu-deepseek-all"}, 2, 4, true},
                                           DpCase{{"deepseek_v3", "tiny-gpu-deepseek-all"}, 4, 6, true},
                                           DpCase{{"deepseek_v3", "tiny-gpu-deepseek-all"}, 4, 1, true},
                                           DpCase{{"glm_moe_dsa", "tiny-gpu-glm-all"}, 4, 4, true}),
                         dp_case_name);

}  // namespace
}  // namespace tachyon::runner
