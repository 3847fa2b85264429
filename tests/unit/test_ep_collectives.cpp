// How many collectives expert parallelism makes per step (docs/parallelism.md, "one count
// exchange per MoE layer"): dist::CountingCommunicator wraps the EP group of DP 2 ranks running
// tiny DeepSeek-V3 and Qwen3-MoE.
// One forward step, prefill or decode, busy or idle (idle_forward), makes on the EP group exactly
// one all_gather (the [G] row counts) and two grouped all_to_all_v (dispatch, return) per MoE
// layer and nothing else: the count exchange is one per MoE layer, not one per item or per peer,
// and no other exchange rides on the EP group.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tachyon/dist/counting_communicator.h"
#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/model/tp_shard.h"

namespace tachyon::model {
namespace {

ModelWeights counting_weights(const char* arch, const char* preset) {
  auto dir = std::filesystem::temp_directory_path() /
             ("tachyon-ep-collectives-" + std::to_string(::getpid()) + "-" + preset);
  make_model({.arch = arch, .preset = preset, .seed = 3, .out_dir = dir});
  ModelWeights weights = load_weights(ModelConfig::from_dir(dir), SafetensorsCheckpoint(dir));
  std::filesystem::remove_all(dir);
  return weights;
}

int64_t ep_count_moe_layers(const ModelConfig& c) {
  int64_t layers = 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) layers += c.is_moe_layer(l);
  return layers;
}

// Two DP ranks (TP 1 each) whose EP group is counted. Step 0: both prefill; step 1: rank 0
// decodes while rank 1 idles. Returns [rank][step] the EP group's counts for that step.
std::vector<std::vector<dist::CollectiveCounts>> count_steps(const ModelWeights& full) {
  const int ranks = 2;
  dist::CpuWorld ep_world(ranks);
  std::vector<std::unique_ptr<dist::CpuWorld>> tp_worlds;
  for (int g = 0; g < ranks; ++g) tp_worlds.push_back(std::make_unique<dist::CpuWorld>(1));
  std::vector<std::vector<dist::CollectiveCounts>> counts(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int g = 0; g < ranks; ++g) {
    threads.emplace_back([&, g] {
      try {
        dist::CpuCommunicator tp(*tp_worlds[static_cast<size_t>(g)], 0), ep_inner(ep_world, g);
        dist::CountingCommunicator ep(ep_inner);
        TpDenseModel model(shard_weights(full, 0, 1, g, ranks), tp, &ep);
        SequenceKvCache cache(model.config(), 64, MlaAttentionForm::kAbsorbed);
        std::vector<int32_t> prompt;
        for (int i = 0; i < 5 + 2 * g; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + g * 11 + 1) % 100));
        model.forward(prompt, cache);
        counts[static_cast<size_t>(g)].push_back(ep.counts());
        ep.reset();
        if (g == 0) {
          const int32_t token = 3;
          model.forward(std::span<const int32_t>(&token, 1), cache);
        } else {
          model.idle_forward();
        }
        counts[static_cast<size_t>(g)].push_back(ep.counts());
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(g)] = e.what();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int g = 0; g < ranks; ++g) EXPECT_EQ(errors[static_cast<size_t>(g)], "") << "rank " << g;
  return counts;
}

TEST(EpCollectives, OneCountExchangeAndTwoAllToAllVPerMoeLayerPerStep) {
  for (const auto& [arch, preset] : {std::pair{"deepseek_v3", "tiny-deepseek"}, std::pair{"qwen3_moe", "tiny-moe"}}) {
    SCOPED_TRACE(preset);
    const ModelWeights full = counting_weights(arch, preset);
    const int64_t layers = ep_count_moe_layers(full.config);
    ASSERT_GT(layers, 0);
    const auto counts = count_steps(full);
    for (size_t g = 0; g < counts.size(); ++g) {
      ASSERT_EQ(counts[g].size(), 2u) << "rank " << g;
      for (size_t step = 0; step < counts[g].size(); ++step) {
        const dist::CollectiveCounts& c = counts[g][step];
        SCOPED_TRACE("rank " + std::to_string(g) + " step " + std::to_string(step) + ", " + std::to_string(layers) +
                     " MoE layers");
        EXPECT_EQ(c.of(dist::CollectiveKind::kAllGather), layers);
        EXPECT_EQ(c.of(dist::CollectiveKind::kAllToAllV), 2 * layers);
        EXPECT_EQ(c.collectives(), 3 * layers);  // nothing else on the EP group
        EXPECT_EQ(c.of(dist::CollectiveKind::kSend) + c.of(dist::CollectiveKind::kRecv) +
                      c.of(dist::CollectiveKind::kSendRecv),
                  0);
      }
    }
  }
}

}  // namespace
}  // namespace tachyon::model
