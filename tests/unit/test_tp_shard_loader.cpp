// Tensor-parallel shards read layer by layer (model/tp_shard_loader.h) are, bit for bit, the
// shards cut from the whole model: bf16 (dense with kv heads split and replicated, MoE with
// experts split and expert-parallel, latent attention, the sparse indexer) and an FP8 run's GPU
// form (every format, online FP8, experts in E4M3), for a whole group and for a node's subset of
// its ranks.
// Run: build/tests/unit_tests --gtest_filter='TpShardLoader*'
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "tachyon/model/make_model.h"
#include "tachyon/model/online_fp8.h"
#include "tachyon/model/tp_shard_loader.h"

namespace tachyon::model {
namespace {

std::filesystem::path loader_test_dir(const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() / ("tachyon-tploader-" + std::to_string(::getpid()) + "-" + tag);
  std::filesystem::remove_all(dir);
  return dir;
}

template <typename T>
void expect_same_shard(const BasicTpShard<T>& got, const BasicTpShard<T>& want) {
  EXPECT_EQ(got.tp_rank, want.tp_rank);
  EXPECT_EQ(got.vocab_begin, want.vocab_begin);
  EXPECT_EQ(got.vocab_rows, want.vocab_rows);
  EXPECT_EQ(got.kv_head_begin, want.kv_head_begin);
  EXPECT_EQ(got.expert_parallel, want.expert_parallel);
  EXPECT_EQ(got.expert_begin, want.expert_begin);
  EXPECT_EQ(got.expert_count, want.expert_count);
  EXPECT_EQ(got.weights.config.num_attention_heads, want.weights.config.num_attention_heads);
  EXPECT_EQ(got.weights.config.moe_intermediate_size, want.weights.config.moe_intermediate_size);
  ASSERT_EQ(got.weights.layers.size(), want.weights.layers.size());
  for (size_t l = 0; l < want.weights.layers.size(); ++l) {
    EXPECT_TRUE(got.weights.layers[l] == want.weights.layers[l]) << "layer " << l;
  }
  EXPECT_EQ(got.weights.embed_tokens, want.weights.embed_tokens);
  EXPECT_EQ(got.weights.lm_head, want.weights.lm_head);
  EXPECT_EQ(got.weights.final_norm, want.weights.final_norm);
}

struct LoaderCase {
  const char* arch;
  const char* preset;
  int tp;
  bool expert_parallel;
};

TEST(TpShardLoader, Bf16ShardsReadLayerByLayerAreTheWholeModelsShards) {
  for (const LoaderCase& c : {LoaderCase{"llama", "tiny", 2, false}, LoaderCase{"qwen2", "tiny-mqa", 4, false},
                              LoaderCase{"llama", "tiny-bias", 2, false}, LoaderCase{"qwen3_moe", "tiny-moe", 2, false},
                              LoaderCase{"qwen3_moe", "tiny-moe", 4, true}, LoaderCase{"deepseek_v3", "tiny-deepseek", 2, false},
                              LoaderCase{"deepseek_v3", "tiny-deepseek", 2, true},
                              LoaderCase{"deepseek_v32", "tiny-dsa", 4, false}}) {
    SCOPED_TRACE(::testing::Message() << c.arch << "/" << c.preset << " tp " << c.tp << (c.expert_parallel ? " ep" : ""));
    const auto dir = loader_test_dir("bf16");
    make_model({.arch = c.arch, .preset = c.preset, .seed = 5, .dtype = DType::kBF16, .out_dir = dir});
    const ModelConfig config = ModelConfig::from_dir(dir);
    const SafetensorsCheckpoint ckpt(dir);
    const Bf16ModelWeights whole = load_weights_bf16(config, ckpt);
    const std::vector<Bf16TpShard> shards = load_bf16_tp_shards(config, ckpt, {0, c.tp, c.tp, c.expert_parallel});
    ASSERT_EQ(shards.size(), static_cast<size_t>(c.tp));
    for (int r = 0; r < c.tp; ++r) {
      SCOPED_TRACE(::testing::Message() << "rank " << r);
      expect_same_shard(shards[static_cast<size_t>(r)], shard_weights(whole, r, c.tp, c.expert_parallel));
    }
    // A node's subset: the last rank alone.
    const std::vector<Bf16TpShard> last = load_bf16_tp_shards(config, ckpt, {c.tp - 1, 1, c.tp, c.expert_parallel});
    ASSERT_EQ(last.size(), 1u);
    expect_same_shard(last[0], shard_weights(whole, c.tp - 1, c.tp, c.expert_parallel));
    std::filesystem::remove_all(dir);
  }
}

// The CPU ranks' f32 shards: an f32 checkpoint and a bf16 one, with and without online FP8 (each
// layer round-tripped as read against quantize_weights_fp8 of the whole model).
TEST(TpShardLoader, F32ShardsReadLayerByLayerAreTheWholeModelsShards) {
  for (const LoaderCase& c : {LoaderCase{"llama", "tiny", 2, false}, LoaderCase{"qwen2", "tiny-mqa", 4, false},
                              LoaderCase{"qwen3_moe", "tiny-moe", 4, true}, LoaderCase{"deepseek_v3", "tiny-deepseek", 2, false},
                              LoaderCase{"deepseek_v32", "tiny-dsa", 2, true}}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool online_fp8 : {false, true}) {
        SCOPED_TRACE(::testing::Message() << c.arch << "/" << c.preset << " tp " << c.tp << (c.expert_parallel ? " ep" : "")
                                          << " " << dtype_name(dtype) << (online_fp8 ? " online FP8" : ""));
        const auto dir = loader_test_dir("f32");
        make_model({.arch = c.arch, .preset = c.preset, .seed = 6, .dtype = dtype, .out_dir = dir});
        const ModelConfig config = ModelConfig::from_dir(dir);
        const SafetensorsCheckpoint ckpt(dir);
        ModelWeights whole = load_weights(config, ckpt);
        if (online_fp8) quantize_weights_fp8(whole);
        const std::vector<TpShard> shards = load_f32_tp_shards(config, ckpt, {0, c.tp, c.tp, c.expert_parallel}, online_fp8);
        ASSERT_EQ(shards.size(), static_cast<size_t>(c.tp));
        for (int r = 0; r < c.tp; ++r) {
          SCOPED_TRACE(::testing::Message() << "rank " << r);
          expect_same_shard(shards[static_cast<size_t>(r)], shard_weights(whole, r, c.tp, c.expert_parallel));
        }
        std::filesystem::remove_all(dir);
      }
    }
  }
}

TEST(TpShardLoader, Fp8ShardsReadLayerByLayerAreTheWholeGpuFormsShards) {
  struct Fp8Case {
    LoaderCase shape;
    WeightQuantization format;  // kNone: online FP8
  };
  for (const Fp8Case& c : {Fp8Case{{"llama", "tiny-gpu", 2, false}, WeightQuantization::kFp8Block},
                           Fp8Case{{"qwen3", "tiny-gpu", 2, false}, WeightQuantization::kNone},
                           Fp8Case{{"mixtral", "tiny-gpu-mixtral", 2, false}, WeightQuantization::kFp8Channel},
                           Fp8Case{{"deepseek_v3", "tiny-gpu-deepseek-tp", 2, false}, WeightQuantization::kFp8Block},
                           Fp8Case{{"deepseek_v3", "tiny-gpu-deepseek-tp", 2, true}, WeightQuantization::kNone}}) {
    SCOPED_TRACE(::testing::Message() << c.shape.arch << "/" << c.shape.preset << " "
                                      << weight_quantization_name(c.format) << (c.shape.expert_parallel ? " ep" : ""));
    const auto dir = loader_test_dir("fp8");
    make_model({.arch = c.shape.arch, .preset = c.shape.preset, .seed = 5, .dtype = DType::kBF16, .out_dir = dir,
                .quantization = c.format});
    const ModelConfig config = ModelConfig::from_dir(dir);
    const SafetensorsCheckpoint ckpt(dir);
    const bool online = c.format == WeightQuantization::kNone;
    const Fp8GpuWeights whole = load_fp8_gpu_weights(config, ckpt, online, Fp8RoutedExperts::kFp8);
    const std::vector<Fp8TpShard> shards = load_fp8_tp_shards(config, ckpt, online, Fp8RoutedExperts::kFp8,
                                                              {0, c.shape.tp, c.shape.tp, c.shape.expert_parallel});
    ASSERT_EQ(shards.size(), static_cast<size_t>(c.shape.tp));
    for (int r = 0; r < c.shape.tp; ++r) {
      SCOPED_TRACE(::testing::Message() << "rank " << r);
      const Fp8TpShard want = shard_fp8_weights(whole, r, c.shape.tp, c.shape.expert_parallel);
      const Fp8TpShard& got = shards[static_cast<size_t>(r)];
      expect_same_shard(got.base, want.base);
      ASSERT_EQ(got.fp8.size(), want.fp8.size());
      size_t fp8_rows = 0;
      for (size_t l = 0; l < want.fp8.size(); ++l) {
        EXPECT_TRUE(got.fp8[l] == want.fp8[l]) << "layer " << l << "'s FP8 projections";
        fp8_rows += static_cast<size_t>(got.fp8[l].o_proj.rows);
      }
      EXPECT_GT(fp8_rows, 0u) << "no FP8 o_proj in the shard";
    }
    std::filesystem::remove_all(dir);
  }
}

}  // namespace
}  // namespace tachyon::model
