// decode_step_min_bytes (model/decode_bytes.h) against the sizes of the tensors a checkpoint of the
// same config holds (expected_tensors): every tensor but the embedding table and the experts the
// batch does not route to, for the real shapes of every architecture family, plus the cache.
#include "tachyon/model/decode_bytes.h"

#include <gtest/gtest.h>

#include <string>

#include "tachyon/model/layer_plan.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model {
namespace {

// Bytes of the weights one decode step of `batch` tokens reads, from the checkpoint's tensor list.
double weight_bytes_from_tensors(const ModelConfig& c, int64_t batch) {
  double values = 0.0;
  for (const auto& [name, shape] : expected_tensors(c)) {
    if (name == "model.embed_tokens.weight" && !c.tie_word_embeddings) continue;  // rows are looked up
    if (name.find("e_score_correction_bias") != std::string::npos) continue;     // E values, not counted
    double count = 1.0;
    for (int64_t d : shape) count *= static_cast<double>(d);
    values += count;
  }
  // Experts the batch does not route to stay in memory.
  const double active = std::min<double>(static_cast<double>(c.num_experts), static_cast<double>(batch * c.num_experts_per_tok));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.is_moe_layer(l)) values -= (c.num_experts - active) * 3.0 * c.hidden_size * c.moe_intermediate_size;
  }
  return 2.0 * values;
}

struct Case {
  const char* arch;
  const char* preset;
};

class DecodeBytes : public ::testing::TestWithParam<Case> {};

TEST_P(DecodeBytes, WeightsAreTheCheckpointsActiveTensors) {
  const ModelConfig c = make_model_config({.arch = GetParam().arch, .preset = GetParam().preset});
  for (int64_t batch : {1, 32}) {
    // Context 0: no cache, the weights alone.
    const double formula = decode_step_min_bytes(c, batch, 0);
    const double tensors = weight_bytes_from_tensors(c, batch);
    EXPECT_NEAR(formula / tensors, 1.0, 1e-4) << GetParam().preset << " batch " << batch;
  }
}

// An FP8 run holds the attention and dense-MLP projections and the shared experts in FP8 (1 byte
// and a 4-byte factor per 128 values); routed experts, kv_b, the indexer, norms and the LM head
// stay bf16 (model/fp8_projections.h). Counted here from the checkpoint's tensor names.
TEST_P(DecodeBytes, Fp8RunsCountTheirProjectionsInFp8) {
  const ModelConfig c = make_model_config({.arch = GetParam().arch, .preset = GetParam().preset});
  double fp8_values = 0.0;
  for (const auto& [name, shape] : expected_tensors(c)) {
    const bool routed_expert = name.find(".experts.") != std::string::npos;
    bool projection = false;
    for (const char* suffix : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight",
                               "up_proj.weight", "down_proj.weight", "q_a_proj.weight", "q_b_proj.weight",
                               "kv_a_proj_with_mqa.weight"}) {
      projection = projection || name.ends_with(suffix);
    }
    if (!projection || routed_expert || name.find("layers.") == std::string::npos) continue;
    const int64_t layer = std::stoll(name.substr(name.find("layers.") + 7));
    if (layer >= c.num_hidden_layers) continue;  // MTP modules: not read by a decode step
    double count = 1.0;
    for (int64_t d : shape) count *= static_cast<double>(d);
    fp8_values += count;
  }
  ASSERT_GT(fp8_values, 0.0);
  for (int64_t batch : {1, 32}) {
    const double saved = decode_step_min_bytes(c, batch, 100) - decode_step_min_bytes(c, batch, 100, true);
    EXPECT_NEAR(saved / (fp8_values * (2.0 - 1.0 - 4.0 / 128.0)), 1.0, 1e-9) << GetParam().preset << " batch " << batch;
  }
}

// Served with FP8 routed experts, an FP8 run reads each routed expert the batch picks in FP8 as well:
// min(E, batch * k) experts of 3 * hidden * moe_intermediate values per MoE layer save 1 - 4 / 128
// bytes a value more; a dense model saves nothing more.
TEST_P(DecodeBytes, Fp8RoutedExpertsCountTheExpertsTheBatchReadsInFp8) {
  const ModelConfig c = make_model_config({.arch = GetParam().arch, .preset = GetParam().preset});
  double moe_layers = 0.0;
  for (const LayerKinds& kinds : layer_plan(c)) moe_layers += kinds.mlp == MlpKind::kExperts;
  for (int64_t batch : {1, 32}) {
    const double saved = decode_step_min_bytes(c, batch, 100, true) -
                         decode_step_min_bytes(c, batch, 100, true, false, /*fp8_routed_experts=*/true);
    const double active = std::min<double>(static_cast<double>(c.num_experts),
                                           static_cast<double>(batch * c.num_experts_per_tok));
    const double values = moe_layers * active * 3.0 * c.hidden_size * c.moe_intermediate_size;
    EXPECT_NEAR(saved, values * (1.0 - 4.0 / 128.0), 1e-6 * (1.0 + saved)) << GetParam().preset << " batch " << batch;
    if (c.num_experts > 0) {
      EXPECT_GT(saved, 0.0) << GetParam().preset;
    }
  }
}

// An FP8 KV cache reads head_dim bytes and a 4-byte factor per cached K or V row of head_dim
// values: it saves batch * context * 2 * kv_size * (1 - 4 / head_dim) bytes of dense attention's
// cache; a latent row takes rank + 2 * rope + 16 bytes (512 + 64: 656 against 1152) and an index
// key dim + 4 (132 against 256), for the rows each step reads.
TEST_P(DecodeBytes, AnFp8KvCacheReadsOneByteAValueAndAFactorPerRow) {
  const ModelConfig c = make_model_config({.arch = GetParam().arch, .preset = GetParam().preset});
  for (int64_t batch : {1, 32}) {
    for (bool fp8_projections : {false, true}) {
      const double saved = decode_step_min_bytes(c, batch, 1000, fp8_projections) -
                           decode_step_min_bytes(c, batch, 1000, fp8_projections, /*fp8_kv_cache=*/true);
      double expected = 0.0;
      if (!c.is_mla()) {
        const double dense_kv_values =
            2.0 * static_cast<double>(c.kv_size()) * batch * 1000.0 * static_cast<double>(c.num_hidden_layers);
        expected = dense_kv_values * (1.0 - 4.0 / static_cast<double>(c.head_dim));
      } else {
        ASSERT_EQ(c.kv_lora_rank, 512);
        ASSERT_EQ(c.qk_rope_head_dim, 64);
        // Every preset here reads all 1000 rows (index_topk >= 1000 where there is an indexer).
        const double rows = batch * 1000.0 * static_cast<double>(c.num_hidden_layers);
        expected = rows * (1152.0 - 656.0);
        if (c.has_sparse_attention()) {
          double full_layers = 0.0;
          for (const LayerKinds& kinds : layer_plan(c)) full_layers += kinds.indexer == IndexerKind::kFull;
          expected += batch * 1000.0 * full_layers * (2.0 * c.index_head_dim - (c.index_head_dim + 4.0));
        }
      }
      EXPECT_NEAR(saved, expected, 1e-6 * (1.0 + saved)) << GetParam().preset << " batch " << batch;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RealShapes, DecodeBytes,
                         ::testing::Values(Case{"llama", "llama-3.1-8b"}, Case{"qwen3", "qwen3-8b"},
                                           Case{"qwen3_moe", "qwen3-30b-a3b"}, Case{"deepseek_v3", "deepseek-v2-lite"},
                                           Case{"deepseek_v3", "deepseek-v3-reduced"},
                                           Case{"deepseek_v32", "deepseek-v32-reduced"},
                                           Case{"glm_moe_dsa", "glm-5-reduced"}),
                         [](const auto& info) {
                           std::string name = info.param.preset;
                           for (char& ch : name) {
                             if (ch == '-' || ch == '.') ch = '_';
                           }
                           return name;
                         });

TEST(DecodeBytesCache, DenseReadsKAndVMlaOneLatentRowDsaAtMostTopkRowsPlusEveryIndexKey) {
  const ModelConfig llama = make_model_config({.arch = "llama", .preset = "llama-3.1-8b"});
  EXPECT_DOUBLE_EQ(decode_step_min_bytes(llama, 4, 1000) - decode_step_min_bytes(llama, 4, 0),
                   2.0 * 4 * 1000 * 32 * 2.0 * 8 * 128);  // bytes * seqs * tokens * layers * (K+V) * kv width
  const ModelConfig v3 = make_model_config({.arch = "deepseek_v3", .preset = "deepseek-v3-reduced"});
  EXPECT_DOUBLE_EQ(decode_step_min_bytes(v3, 2, 5000) - decode_step_min_bytes(v3, 2, 0), 2.0 * 2 * 5000 * 4 * 576.0);
  const ModelConfig v32 = make_model_config({.arch = "deepseek_v32", .preset = "deepseek-v32-reduced"});
  // Past the top-2048, attention reads 2048 latent rows whatever the context; the indexer every key.
  EXPECT_DOUBLE_EQ(decode_step_min_bytes(v32, 1, 100000) - decode_step_min_bytes(v32, 1, 0),
                   2.0 * 4 * (2048 * 576.0 + 100000 * 128.0));
}

}  // namespace
}  // namespace tachyon::model
