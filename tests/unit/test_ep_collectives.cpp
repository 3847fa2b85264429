// How many collectives expert parallelism makes per step (docs/parallelism.md, "one count
// exchange per MoE layer"): a communicator that counts every call and forwards it to the CPU
// backend wraps the EP group of DP 2 ranks running tiny DeepSeek-V3 and Qwen3-MoE.
//   - one dispatch_experts call: exactly one all_gather (the [G] row counts) and two grouped
//     all_to_all_v (dispatch, return), nothing else;
//   - one forward step, prefill or decode, busy or idle (idle_forward): exactly that per MoE
//     layer on the EP group and nothing more, so the count exchange is one per MoE layer, not
//     one per item or per peer, and no other host exchange rides on the EP group.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/model/tp_shard.h"

namespace tachyon::model {
namespace {

// Forwards every call to `inner` and counts it by name.
class CountingCommunicator final : public dist::Communicator {
 public:
  explicit CountingCommunicator(dist::Communicator& inner) : inner_(inner) {}
  std::map<std::string, int64_t> counts;  // call name -> calls since the last clear()

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_reduce(const void* s, void* r, size_t n, dist::ReduceType t, void* st) override {
    ++counts["all_reduce"];
    inner_.all_reduce(s, r, n, t, st);
  }
  void all_gather(const void* s, void* r, size_t b, void* st) override {
    ++counts["all_gather"];
    inner_.all_gather(s, r, b, st);
  }
  void reduce_scatter(const void* s, void* r, size_t n, dist::ReduceType t, void* st) override {
    ++counts["reduce_scatter"];
    inner_.reduce_scatter(s, r, n, t, st);
  }
  void broadcast(void* d, size_t b, int root, void* st) override {
    ++counts["broadcast"];
    inner_.broadcast(d, b, root, st);
  }
  void all_gatherv(std::span<const dist::GatherItem> items, void* st) override {
    ++counts["all_gatherv"];
    inner_.all_gatherv(items, st);
  }
  void all_to_all_v(std::span<const dist::AllToAllItem> items, void* st) override {
    ++counts["all_to_all_v"];
    inner_.all_to_all_v(items, st);
  }
  void send(const void* d, size_t b, int peer, void* st) override {
    ++counts["send"];
    inner_.send(d, b, peer, st);
  }
  void recv(void* d, size_t b, int peer, void* st) override {
    ++counts["recv"];
    inner_.recv(d, b, peer, st);
  }
  void send_recv(const void* sd, size_t sb, int dst, void* rd, size_t rb, int src, void* st) override {
    ++counts["send_recv"];
    inner_.send_recv(sd, sb, dst, rd, rb, src, st);
  }
  void barrier() override {
    ++counts["barrier"];
    inner_.barrier();
  }

 private:
  dist::Communicator& inner_;
};

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
std::vector<std::vector<std::map<std::string, int64_t>>> count_steps(const ModelWeights& full) {
  const int ranks = 2;
  dist::CpuWorld ep_world(ranks);
  std::vector<std::unique_ptr<dist::CpuWorld>> tp_worlds;
  for (int g = 0; g < ranks; ++g) tp_worlds.push_back(std::make_unique<dist::CpuWorld>(1));
  std::vector<std::vector<std::map<std::string, int64_t>>> counts(ranks);
  std::vector<std::string> errors(ranks);
  std::vector<std::thread> threads;
  for (int g = 0; g < ranks; ++g) {
    threads.emplace_back([&, g] {
      try {
        dist::CpuCommunicator tp(*tp_worlds[static_cast<size_t>(g)], 0), ep_inner(ep_world, g);
        CountingCommunicator ep(ep_inner);
        TpDenseModel model(shard_weights(full, 0, 1, g, ranks), tp, &ep);
        SequenceKvCache cache(model.config(), 64, MlaAttentionForm::kAbsorbed);
        std::vector<int32_t> prompt;
        for (int i = 0; i < 5 + 2 * g; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + g * 11 + 1) % 100));
        model.forward(prompt, cache);
        counts[static_cast<size_t>(g)].push_back(ep.counts);
        ep.counts.clear();
        if (g == 0) {
          const int32_t token = 3;
          model.forward(std::span<const int32_t>(&token, 1), cache);
        } else {
          model.idle_forward();
        }
        counts[static_cast<size_t>(g)].push_back(ep.counts);
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
    const std::map<std::string, int64_t> per_step = {{"all_gather", layers}, {"all_to_all_v", 2 * layers}};
    const auto counts = count_steps(full);
    for (size_t g = 0; g < counts.size(); ++g) {
      ASSERT_EQ(counts[g].size(), 2u) << "rank " << g;
      for (size_t step = 0; step < counts[g].size(); ++step) {
        EXPECT_EQ(counts[g][step], per_step) << "rank " << g << " step " << step << " (" << layers << " MoE layers)";
      }
    }
  }
}

}  // namespace
}  // namespace tachyon::model
