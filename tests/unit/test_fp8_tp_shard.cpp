// FP8 weights for tensor-parallel GPU ranks (model/fp8_tp_shard.h): every rank's shard, its FP8
// projections dequantized, is exactly shard_weights' shard of the dequantized model (so a rank
// computes with the values the single-GPU FP8 run gives it), for dense, MoE (experts split or
// expert-parallel) and latent attention models and every FP8 checkpoint format; a cut inside a
// factor's 128-column span is refused naming the projection.
// Run: build/tests/unit_tests --gtest_filter='Fp8TpShard*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tachyon/base/check.h"
#include "tachyon/model/fp8_tp_shard.h"
#include "tachyon/model/make_model.h"

namespace tachyon::model {
namespace {

// The values a weight in the GPU form stands for: e4m3 * its row's factor for the 128 columns.
std::vector<float> dequantized(const Fp8BlockWeight& q) {
  std::vector<float> out(static_cast<size_t>(q.rows * q.cols));
  dequantize_fp8_blocks(q.data, q.scale_inv, q.rows, q.cols, q.block_rows, q.block_cols, out);
  return out;
}

// The f32 model an FP8 run's GPU weights stand for: bf16 tensors widened, FP8 ones dequantized.
ModelWeights values_of(const Fp8GpuWeights& w) {
  ModelWeights out = to_f32_weights(w.bf16);
  for (size_t l = 0; l < w.fp8.size(); ++l) {
    const Fp8LayerProjections& f = w.fp8[l];
    LayerWeights& layer = out.layers[l];
    for (auto [q, values] : std::initializer_list<std::pair<const Fp8BlockWeight*, std::vector<float>*>>{
             {&f.qkv, &layer.qkv}, {&f.o_proj, &layer.o_proj}, {&f.gate_up, &layer.gate_up}, {&f.down, &layer.down},
             {&f.shared_gate_up, &layer.shared_gate_up}, {&f.shared_down, &layer.shared_down},
             {&f.q_a_proj, &layer.q_a_proj}, {&f.q_b_proj, &layer.q_b_proj}, {&f.kv_a_proj, &layer.kv_a_proj},
             {&f.experts_gate_up, &layer.experts_gate_up}, {&f.experts_down, &layer.experts_down}}) {
      if (q->rows == 0) continue;
      EXPECT_TRUE(values->empty()) << "layer " << l << ": a projection held in bf16 and in FP8";
      *values = dequantized(*q);
    }
  }
  return out;
}

std::filesystem::path shard_test_dir(const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() / ("tachyon-fp8tp-" + std::to_string(::getpid()) + "-" + tag);
  std::filesystem::remove_all(dir);
  return dir;
}

struct ShardCase {
  const char* arch;
  const char* preset;
  WeightQuantization format;  // kNone: online FP8 of the bf16 checkpoint
  bool expert_parallel;
};

Fp8GpuWeights fp8_model(const ShardCase& c, const std::filesystem::path& dir) {
  make_model({.arch = c.arch, .preset = c.preset, .seed = 3, .dtype = DType::kBF16, .out_dir = dir,
              .quantization = c.format});
  const SafetensorsCheckpoint ckpt(dir);
  return load_fp8_gpu_weights(ModelConfig::from_dir(dir), ckpt, c.format == WeightQuantization::kNone,
                              Fp8RoutedExperts::kFp8);
}

void expect_same_tensors(const LayerWeights& got, const LayerWeights& want, size_t layer) {
  EXPECT_TRUE(got == want) << "layer " << layer;
  if (got == want) return;
  // Name the first tensor that differs, for the failure message.
  const std::vector<std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>>> named = {
      {"qkv", {&got.qkv, &want.qkv}},           {"o_proj", {&got.o_proj, &want.o_proj}},
      {"gate_up", {&got.gate_up, &want.gate_up}}, {"down", {&got.down, &want.down}},
      {"experts_gate_up", {&got.experts_gate_up, &want.experts_gate_up}},
      {"experts_down", {&got.experts_down, &want.experts_down}},
      {"shared_gate_up", {&got.shared_gate_up, &want.shared_gate_up}},
      {"shared_down", {&got.shared_down, &want.shared_down}}, {"q_b_proj", {&got.q_b_proj, &want.q_b_proj}},
      {"kv_b_proj", {&got.kv_b_proj, &want.kv_b_proj}}};
  for (const auto& [name, pair] : named) EXPECT_TRUE(*pair.first == *pair.second) << "layer " << layer << " " << name;
}

TEST(Fp8TpShard, EachRanksDequantizedShardIsTheShardOfTheDequantizedModel) {
  for (const ShardCase& c : {ShardCase{"llama", "tiny-gpu", WeightQuantization::kFp8Block, false},
                             ShardCase{"qwen3", "tiny-gpu", WeightQuantization::kNone, false},
                             ShardCase{"llama", "tiny-gpu-bias", WeightQuantization::kFp8Tensor, false},
                             ShardCase{"mixtral", "tiny-gpu-mixtral", WeightQuantization::kFp8Channel, false},
                             ShardCase{"qwen3_moe", "tiny-gpu-moe", WeightQuantization::kFp8Block, true},
                             ShardCase{"deepseek_v3", "tiny-gpu-deepseek-tp", WeightQuantization::kFp8Block, false},
                             ShardCase{"deepseek_v3", "tiny-gpu-deepseek-tp", WeightQuantization::kNone, true}}) {
    SCOPED_TRACE(std::string(c.arch) + "/" + c.preset + "/" + std::string(weight_quantization_name(c.format)) +
                 (c.expert_parallel ? " expert-parallel" : ""));
    const auto dir = shard_test_dir("model");
    const Fp8GpuWeights full = fp8_model(c, dir);
    const ModelWeights full_values = values_of(full);
    const int tp = 2;
    for (int rank = 0; rank < tp; ++rank) {
      SCOPED_TRACE(::testing::Message() << "rank " << rank);
      Fp8TpShard shard = shard_fp8_weights(full, rank, tp, c.expert_parallel);
      const TpShard want = shard_weights(full_values, rank, tp, c.expert_parallel);
      EXPECT_EQ(shard.base.vocab_begin, want.vocab_begin);
      EXPECT_EQ(shard.base.expert_begin, want.expert_begin);
      EXPECT_EQ(shard.base.expert_count, want.expert_count);
      const Fp8GpuWeights weights = shard.take_weights();
      size_t fp8_weights = 0;
      for (const Fp8LayerProjections& f : weights.fp8) fp8_weights += (f.qkv.rows > 0) + (f.q_b_proj.rows > 0);
      EXPECT_GT(fp8_weights, 0u) << "the shard holds no FP8 projection";
      const ModelWeights got = values_of(weights);
      ASSERT_EQ(got.layers.size(), want.weights.layers.size());
      for (size_t l = 0; l < got.layers.size(); ++l) expect_same_tensors(got.layers[l], want.weights.layers[l], l);
      EXPECT_EQ(got.embed_tokens, want.weights.embed_tokens);
      EXPECT_EQ(got.lm_head, want.weights.lm_head);
    }
    std::filesystem::remove_all(dir);
  }
}

TEST(Fp8TpShard, ACutInsideAFactorsSpanIsRefusedNamingTheProjection) {
  // tiny-deepseek's heads are 16 values wide: a rank's o_proj columns at --tp 2 are 32.
  const auto dir = shard_test_dir("refused");
  const Fp8GpuWeights full = fp8_model({"deepseek_v3", "tiny-gpu-deepseek-all", WeightQuantization::kFp8Block, false}, dir);
  try {
    shard_fp8_weights(full, 1, 2, false);
    FAIL() << "a 32-column cut of o_proj was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("o_proj"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[32, 64) of 64"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// fp8_tp_unsupported_reason (read before loading, from the shapes) refuses exactly the groups whose
// shards shard_fp8_weights refuses, over online FP8 with the experts in E4M3 (every projection FP8).
TEST(Fp8TpShard, TheShapeCheckRefusesExactlyTheGroupsTheCutRefuses) {
  struct Case {
    const char* arch;
    const char* preset;
  };
  int refused = 0, accepted = 0;
  for (const Case& c : {Case{"llama", "tiny-gpu"}, Case{"qwen3_moe", "tiny-gpu-moe"},
                        Case{"mixtral", "tiny-gpu-mixtral"}, Case{"deepseek_v3", "tiny-gpu-deepseek-tp"},
                        Case{"deepseek_v3", "tiny-gpu-deepseek-all"}}) {
    const auto dir = shard_test_dir("shapes");
    const Fp8GpuWeights full = fp8_model({c.arch, c.preset, WeightQuantization::kNone, false}, dir);
    const ModelConfig& config = full.bf16.config;
    for (int tp : {2, 4}) {
      for (bool ep : {false, true}) {
        if (ep && config.num_experts == 0) continue;
        try {
          check_tp_size(config, tp, ep);
        } catch (const Error&) {
          continue;  // not a TP group of this model at all
        }
        SCOPED_TRACE(::testing::Message() << c.preset << " tp " << tp << (ep ? " ep" : ""));
        const std::string reason = fp8_tp_unsupported_reason(config, tp, ep);
        std::string cut_error;
        try {
          for (int rank = 0; rank < tp; ++rank) shard_fp8_weights(full, rank, tp, ep);
        } catch (const Error& e) {
          cut_error = e.what();
        }
        EXPECT_EQ(reason.empty(), cut_error.empty()) << "shape check: '" << reason << "'; cut: '" << cut_error << "'";
        (reason.empty() ? accepted : refused) += 1;
      }
    }
    std::filesystem::remove_all(dir);
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);
  EXPECT_EQ(fp8_tp_unsupported_reason(ModelConfig{}, 1, false), "");
}

}  // namespace
}  // namespace tachyon::model
