// layer_plan (model/layer_plan.h), the one place a family's per-layer structure is decided: for
// every architecture row, the tiny presets' plans are what the family is, written out layer by
// layer from the config fields that make them so (checked alongside), not from the ModelConfig
// predicates the plan calls. Plus the MTP module's layer, hand-made layer patterns, and a shared
// indexer layer with no full one before it.
#include "tachyon/model/layer_plan.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "tachyon/base/check.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/mtp.h"

namespace tachyon::model {
namespace {

constexpr AttentionKind D = AttentionKind::kDense, L = AttentionKind::kLatent;
constexpr MlpKind M = MlpKind::kDense, E = MlpKind::kExperts;
constexpr IndexerKind N = IndexerKind::kNone, F = IndexerKind::kFull, S = IndexerKind::kShared;

std::string kinds_string(const std::vector<LayerKinds>& plan) {
  std::string out;
  for (const LayerKinds& k : plan) {
    out += k.attention == L ? 'L' : 'D';
    out += k.mlp == E ? 'E' : 'M';
    out += k.indexer == F ? 'F' : k.indexer == S ? 'S' : 'N';
    out += ' ';
  }
  return out;
}

void expect_plan(const ModelConfig& c, const std::vector<LayerKinds>& expected, const std::string& label) {
  const std::vector<LayerKinds> plan = layer_plan(c);
  ASSERT_EQ(static_cast<int64_t>(plan.size()), c.num_hidden_layers) << label;
  EXPECT_EQ(kinds_string(plan), kinds_string(expected)) << label;
}

ModelConfig preset(const std::string& arch, const std::string& name) {
  return make_model_config({.arch = arch, .preset = name});
}

// Dense families (Llama, Mistral, Qwen2, Qwen3): every layer dense attention, dense MLP, no indexer.
void check_dense(const std::string& arch) {
  const ModelConfig c = preset(arch, "tiny");
  ASSERT_EQ(c.kv_lora_rank, 0);
  ASSERT_EQ(c.num_experts, 0);
  ASSERT_EQ(c.index_topk, 0);
  ASSERT_EQ(c.num_hidden_layers, 2);
  expect_plan(c, {{D, M, N}, {D, M, N}}, arch + " tiny");
}

// Qwen3-MoE: expert layers where (l + 1) % decoder_sparse_step == 0, except mlp_only_layers.
void check_qwen3_moe(const std::string& arch) {
  ModelConfig c = preset(arch, "tiny-moe");
  ASSERT_EQ(c.num_hidden_layers, 4);
  ASSERT_EQ(c.decoder_sparse_step, 1);
  ASSERT_EQ(c.mlp_only_layers, std::vector<int64_t>{0});
  expect_plan(c, {{D, M, N}, {D, E, N}, {D, E, N}, {D, E, N}}, "tiny-moe");

  c = preset(arch, "tiny-moe-nonorm");
  ASSERT_EQ(c.num_hidden_layers, 4);
  ASSERT_EQ(c.decoder_sparse_step, 2);
  ASSERT_TRUE(c.mlp_only_layers.empty());
  expect_plan(c, {{D, M, N}, {D, E, N}, {D, M, N}, {D, E, N}}, "tiny-moe-nonorm");

  // Both rules at once: every second layer, but layer 3 kept dense.
  c.num_hidden_layers = 6;
  c.mlp_only_layers = {3};
  expect_plan(c, {{D, M, N}, {D, E, N}, {D, M, N}, {D, M, N}, {D, M, N}, {D, E, N}}, "step 2, mlp_only_layers {3}");
}

// Mixtral: every layer a mixture of experts.
void check_mixtral(const std::string& arch) {
  const ModelConfig c = preset(arch, "tiny-mixtral");
  ASSERT_EQ(c.num_hidden_layers, 4);
  ASSERT_GT(c.num_experts, 0);
  expect_plan(c, {{D, E, N}, {D, E, N}, {D, E, N}, {D, E, N}}, "tiny-mixtral");
}

// DeepSeek-V3: latent attention on every layer, the first first_k_dense_replace layers dense MLPs.
void check_deepseek_v3(const std::string& arch) {
  ModelConfig c = preset(arch, "tiny-deepseek");
  ASSERT_GT(c.kv_lora_rank, 0);
  ASSERT_EQ(c.index_topk, 0);
  ASSERT_EQ(c.num_hidden_layers, 3);
  ASSERT_EQ(c.first_k_dense_replace, 1);
  expect_plan(c, {{L, M, N}, {L, E, N}, {L, E, N}}, "tiny-deepseek");
  c.first_k_dense_replace = 2;
  expect_plan(c, {{L, M, N}, {L, M, N}, {L, E, N}}, "first_k_dense_replace 2");

  // The MTP module's one layer: latent attention over experts.
  const ModelConfig mtp = preset(arch, "tiny-deepseek-mtp");
  ASSERT_EQ(mtp.num_nextn_predict_layers, 1);
  expect_plan(mtp_layer_config(mtp), {{L, E, N}}, "tiny-deepseek-mtp's module");
}

// DeepSeek-V3.2: DeepSeek-V3 with a full indexer on every layer.
void check_deepseek_v32(const std::string& arch) {
  const ModelConfig c = preset(arch, "tiny-dsa");
  ASSERT_GT(c.index_topk, 0);
  ASSERT_TRUE(c.indexer_types.empty());
  ASSERT_EQ(c.num_hidden_layers, 3);
  ASSERT_EQ(c.first_k_dense_replace, 1);
  expect_plan(c, {{L, M, F}, {L, E, F}, {L, E, F}}, "tiny-dsa");
  expect_plan(mtp_layer_config(c), {{L, E, F}}, "tiny-dsa's MTP layer");
}

// GLM-5: the indexer full or shared per indexer_types; an MTP layer runs its own.
void check_glm_moe_dsa(const std::string& arch) {
  ModelConfig c = preset(arch, "tiny-glm-dsa");
  ASSERT_EQ(c.num_hidden_layers, 4);
  ASSERT_EQ(c.first_k_dense_replace, 1);
  ASSERT_EQ(c.indexer_types, (std::vector<IndexerType>{IndexerType::kFull, IndexerType::kShared, IndexerType::kFull,
                                                       IndexerType::kShared}));
  expect_plan(c, {{L, M, F}, {L, E, S}, {L, E, F}, {L, E, S}}, "tiny-glm-dsa");
  expect_plan(mtp_layer_config(c), {{L, E, F}}, "tiny-glm-dsa's MTP layer");

  c.indexer_types = {IndexerType::kFull, IndexerType::kShared, IndexerType::kShared, IndexerType::kFull};
  expect_plan(c, {{L, M, F}, {L, E, S}, {L, E, S}, {L, E, F}}, "indexer_types FSSF");
  c.indexer_types = {};
  expect_plan(c, {{L, M, F}, {L, E, F}, {L, E, F}, {L, E, F}}, "no indexer_types: every layer full");
}

TEST(LayerPlan, EveryArchitectureRowHasTheKindsOfItsFamily) {
  const std::map<std::string, void (*)(const std::string&)> checks = {
      {"llama", check_dense},           {"mistral", check_dense},          {"qwen2", check_dense},
      {"qwen3", check_dense},           {"qwen3_moe", check_qwen3_moe},    {"mixtral", check_mixtral},
      {"deepseek_v3", check_deepseek_v3}, {"deepseek_v32", check_deepseek_v32}, {"glm_moe_dsa", check_glm_moe_dsa},
  };
  for (const Architecture& row : architectures()) {
    SCOPED_TRACE(row.model_type);
    const auto check = checks.find(row.model_type);
    ASSERT_NE(check, checks.end()) << "no layer-plan expectations for " << row.model_type << ": add them here";
    check->second(row.model_type);
  }
  EXPECT_EQ(checks.size(), architectures().size());
}

TEST(LayerPlan, SharedIndexerLayerNeedsAFullOneBefore) {
  ModelConfig c = preset("glm_moe_dsa", "tiny-glm-dsa");
  c.indexer_types = {IndexerType::kShared, IndexerType::kFull, IndexerType::kFull, IndexerType::kFull};
  EXPECT_THROW(layer_plan(c), Error);
}

}  // namespace
}  // namespace tachyon::model
