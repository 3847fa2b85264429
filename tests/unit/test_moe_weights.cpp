// Qwen3-MoE's config and checkpoint: config.json fields and which layers are MoE
// (decoder_sparse_step, mlp_only_layers), the tensor names real Qwen3-30B-A3B checkpoints use,
// the stacked expert layout in f32 and bf16, the errors a user sees, and make-model's config.json.
// The forward: test_moe.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "../moe_test_util.h"
#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/model_config.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/model/safetensors.h"

namespace tachyon::model {
namespace {

nlohmann::json moe_json() {
  return {{"architectures", {"Qwen3MoeForCausalLM"}},
          {"vocab_size", 1000},
          {"hidden_size", 64},
          {"intermediate_size", 128},
          {"num_hidden_layers", 6},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2},
          {"head_dim", 16},
          {"num_experts", 8},
          {"num_experts_per_tok", 2},
          {"moe_intermediate_size", 32},
          {"norm_topk_prob", true},
          {"decoder_sparse_step", 1},
          {"mlp_only_layers", nlohmann::json::array()}};
}

std::vector<int64_t> moe_layers(const ModelConfig& c) {
  std::vector<int64_t> out;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.is_moe_layer(l)) out.push_back(l);
  }
  return out;
}

std::string error_of(const nlohmann::json& json) {
  try {
    ModelConfig::from_json(json, "moe/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MoeConfig, ParsesTheExpertFields) {
  ModelConfig c = ModelConfig::from_json(moe_json());
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_TRUE(c.is_moe());
  EXPECT_EQ(ModelConfig::from_json(c.to_json()).to_json(), c.to_json());
}

TEST(MoeConfig, MissingFieldsTakeTransformersDefaults) {
  nlohmann::json json = moe_json();
  for (const char* key : {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                          "decoder_sparse_step", "mlp_only_layers"}) {
    json.erase(key);
  }
  ModelConfig c = ModelConfig::from_json(json);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 768);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.decoder_sparse_step, 1);
  EXPECT_TRUE(c.mlp_only_layers.empty());
}

TEST(MoeConfig, SparseStepAndMlpOnlyLayersPickTheMoeLayers) {
  nlohmann::json json = moe_json();
  EXPECT_EQ(moe_layers(ModelConfig::from_json(json)), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
  json["mlp_only_layers"] = {0};
  EXPECT_EQ(moe_layers(ModelConfig::from_json(json)), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  json["decoder_sparse_step"] = 2;  // (l + 1) % 2 == 0: layers 1, 3, 5
  json["mlp_only_layers"] = nlohmann::json::array();
  EXPECT_EQ(moe_layers(ModelConfig::from_json(json)), (std::vector<int64_t>{1, 3, 5}));
  json["mlp_only_layers"] = {3};
  EXPECT_EQ(moe_layers(ModelConfig::from_json(json)), (std::vector<int64_t>{1, 5}));
  json["decoder_sparse_step"] = 3;  // layers 2 and 5
  json["mlp_only_layers"] = {0, 1};
  EXPECT_EQ(moe_layers(ModelConfig::from_json(json)), (std::vector<int64_t>{2, 5}));
  json["decoder_sparse_step"] = 7;  // past the last layer: no MoE layer at all
  ModelConfig none = ModelConfig::from_json(json);
  EXPECT_TRUE(moe_layers(none).empty());
  EXPECT_FALSE(none.is_moe());
  json["decoder_sparse_step"] = 1;
  json["num_experts"] = 0;  // no experts: every layer dense
  EXPECT_TRUE(moe_layers(ModelConfig::from_json(json)).empty());
  // Dense architectures never have MoE layers.
  nlohmann::json qwen3 = moe_json();
  qwen3["architectures"] = {"Qwen3ForCausalLM"};
  EXPECT_FALSE(ModelConfig::from_json(qwen3).is_moe());
}

TEST(MoeConfig, ErrorsNameTheField) {
  nlohmann::json json = moe_json();
  json["num_experts_per_tok"] = 9;
  EXPECT_NE(error_of(json).find("num_experts_per_tok (9) exceeds num_experts (8)"), std::string::npos)
      << error_of(json);
  json = moe_json();
  json["mlp_only_layers"] = {2, 6};
  EXPECT_NE(error_of(json).find("mlp_only_layers entry 6 is not a layer index in [0, 6)"), std::string::npos)
      << error_of(json);
  json = moe_json();
  json["decoder_sparse_step"] = 0;
  EXPECT_NE(error_of(json).find("'decoder_sparse_step' must be at least 1"), std::string::npos) << error_of(json);
  json = moe_json();
  json["num_experts"] = "many";
  EXPECT_NE(error_of(json).find("'num_experts' must be an integer"), std::string::npos) << error_of(json);
  json = moe_json();
  json["use_sliding_window"] = true;
  EXPECT_NE(error_of(json).find("use_sliding_window"), std::string::npos) << error_of(json);
}

TEST(MoeWeights, ExpectedTensorsUseTheCheckpointNames) {
  nlohmann::json json = moe_json();
  json["mlp_only_layers"] = {0};
  const ModelConfig c = ModelConfig::from_json(json);
  std::map<std::string, std::vector<int64_t>> tensors;
  for (auto& [name, shape] : expected_tensors(c)) tensors.emplace(name, shape);
  using Shape = std::vector<int64_t>;
  EXPECT_EQ(tensors.at("model.layers.0.mlp.gate_proj.weight"), (Shape{128, 64}));  // dense layer 0
  EXPECT_FALSE(tensors.count("model.layers.0.mlp.gate.weight"));
  EXPECT_EQ(tensors.at("model.layers.1.mlp.gate.weight"), (Shape{8, 64}));
  EXPECT_EQ(tensors.at("model.layers.1.mlp.experts.0.gate_proj.weight"), (Shape{32, 64}));
  EXPECT_EQ(tensors.at("model.layers.5.mlp.experts.7.up_proj.weight"), (Shape{32, 64}));
  EXPECT_EQ(tensors.at("model.layers.5.mlp.experts.7.down_proj.weight"), (Shape{64, 32}));
  EXPECT_FALSE(tensors.count("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_FALSE(tensors.count("model.layers.1.mlp.experts.8.up_proj.weight"));
  EXPECT_TRUE(tensors.count("model.layers.3.self_attn.q_norm.weight"));
  // Per layer: 2 norms, q/k/v/o, q/k norms; then 3 dense MLP tensors or 1 router + 3 per expert.
  const size_t per_layer = 8;
  EXPECT_EQ(tensors.size(), 3 + 6 * per_layer + 3 + 5 * (1 + 3 * 8));
}

std::filesystem::path temp_dir(const std::string& tag) { return testing::fresh_temp_dir("moe-w-" + tag); }
using testing::tensor_f32;

TEST(MoeWeights, ExpertsAreStackedPerLayerAsGateUpThenDown) {
  const auto dir = temp_dir("layout");
  make_model({.arch = "qwen3_moe", .preset = "tiny-moe", .seed = 4, .dtype = DType::kBF16, .out_dir = dir});
  const ModelConfig c = ModelConfig::from_dir(dir);
  const SafetensorsCheckpoint checkpoint(dir);
  const ModelWeights w = load_weights(c, checkpoint);
  const Bf16ModelWeights b = load_weights_bf16(c, checkpoint);
  const int64_t h = c.hidden_size, inter = c.moe_intermediate_size, experts = c.num_experts;

  // Layer 0 is dense (mlp_only_layers [0]): the MoE fields are empty.
  EXPECT_EQ(w.layers[0].gate_up.size(), static_cast<size_t>(2 * c.intermediate_size * h));
  EXPECT_TRUE(w.layers[0].router.empty() && w.layers[0].experts_gate_up.empty() && w.layers[0].experts_down.empty());
  for (int64_t l = 1; l < c.num_hidden_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    EXPECT_TRUE(lw.gate_up.empty() && lw.down.empty()) << l;
    ASSERT_EQ(lw.router.size(), static_cast<size_t>(experts * h));
    ASSERT_EQ(lw.experts_gate_up.size(), static_cast<size_t>(experts * 2 * inter * h));
    ASSERT_EQ(lw.experts_down.size(), static_cast<size_t>(experts * h * inter));
    EXPECT_EQ(b.layers[static_cast<size_t>(l)].experts_gate_up.size(), lw.experts_gate_up.size());
    const std::string prefix = "model.layers." + std::to_string(l) + ".mlp.";
    EXPECT_EQ(lw.router, tensor_f32(checkpoint, prefix + "gate.weight"));
    for (int64_t e = 0; e < experts; ++e) {
      const std::string expert = prefix + "experts." + std::to_string(e) + ".";
      const auto gate = tensor_f32(checkpoint, expert + "gate_proj.weight");
      const auto up = tensor_f32(checkpoint, expert + "up_proj.weight");
      const auto down = tensor_f32(checkpoint, expert + "down_proj.weight");
      const float* stacked = lw.experts_gate_up.data() + e * 2 * inter * h;  // [gate; up] of expert e
      EXPECT_TRUE(std::equal(gate.begin(), gate.end(), stacked)) << l << " " << e;
      EXPECT_TRUE(std::equal(up.begin(), up.end(), stacked + inter * h)) << l << " " << e;
      EXPECT_TRUE(std::equal(down.begin(), down.end(), lw.experts_down.data() + e * h * inter)) << l << " " << e;
      // A bf16 checkpoint reaches Bf16ModelWeights bit for bit, in the same layout.
      const TensorView& up_view = checkpoint.at(expert + "up_proj.weight");
      EXPECT_EQ(std::memcmp(b.layers[static_cast<size_t>(l)].experts_gate_up.data() + e * 2 * inter * h + inter * h,
                            up_view.data, static_cast<size_t>(inter * h) * 2),
                0);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(MoeWeights, ErrorsNameTheTensor) {
  const auto dir = temp_dir("errors");
  make_model({.arch = "qwen3_moe", .preset = "tiny-moe-nonorm", .seed = 0, .out_dir = dir});
  const ModelConfig c = ModelConfig::from_dir(dir);
  const SafetensorsCheckpoint checkpoint(dir);
  auto error_of_loading = [&](const ModelConfig& config) -> std::string {
    try {
      load_weights(config, checkpoint);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  ModelConfig more_experts = c;
  more_experts.num_experts = 9;
  EXPECT_NE(error_of_loading(more_experts).find("'model.layers.1.mlp.gate.weight' has shape [8, 64]"),
            std::string::npos)
      << error_of_loading(more_experts);
  ModelConfig dense_layer_1 = c;
  dense_layer_1.mlp_only_layers = {1};
  EXPECT_NE(error_of_loading(dense_layer_1).find("missing tensor 'model.layers.1.mlp.gate_proj.weight'"),
            std::string::npos)
      << error_of_loading(dense_layer_1);
  ModelConfig sparse_layer_0 = c;
  sparse_layer_0.decoder_sparse_step = 1;  // layer 0 would be MoE, but the checkpoint holds its dense MLP
  EXPECT_NE(error_of_loading(sparse_layer_0).find("missing tensor 'model.layers.0.mlp.gate.weight'"),
            std::string::npos)
      << error_of_loading(sparse_layer_0);
  ModelConfig wider = c;
  wider.moe_intermediate_size = 48;
  EXPECT_NE(error_of_loading(wider).find("'model.layers.1.mlp.experts.0.gate_proj.weight' has shape [32, 64]"),
            std::string::npos)
      << error_of_loading(wider);
  std::filesystem::remove_all(dir);
}

TEST(MoeMakeModel, WritesAConfigTransformersReads) {
  const auto dir = temp_dir("config");
  make_model({.arch = "qwen3_moe", .preset = "tiny-moe", .out_dir = dir});
  const nlohmann::json json = read_json_file(dir / "config.json");
  EXPECT_EQ(json["architectures"], nlohmann::json::array({"Qwen3MoeForCausalLM"}));
  EXPECT_EQ(json["model_type"], "qwen3_moe");
  EXPECT_EQ(json["num_experts"], 8);
  EXPECT_EQ(json["num_experts_per_tok"], 2);
  EXPECT_EQ(json["moe_intermediate_size"], 32);
  EXPECT_EQ(json["intermediate_size"], 128);
  EXPECT_EQ(json["norm_topk_prob"], true);
  EXPECT_EQ(json["decoder_sparse_step"], 1);
  EXPECT_EQ(json["mlp_only_layers"], nlohmann::json::array({0}));
  EXPECT_EQ(json["output_router_logits"], false);
  EXPECT_EQ(json["use_sliding_window"], false);
  EXPECT_EQ(json["attention_bias"], false);
  std::filesystem::remove_all(dir);

  const ModelConfig nonorm = make_model_config({.arch = "qwen3_moe", .preset = "tiny-moe-nonorm"});
  EXPECT_FALSE(nonorm.norm_topk_prob);
  EXPECT_EQ(nonorm.num_experts_per_tok, 3);
  EXPECT_EQ(moe_layers(nonorm), (std::vector<int64_t>{1, 3}));
}

TEST(MoeMakeModel, PresetsAndArchitecturesMustAgree) {
  try {
    make_model_config({.arch = "qwen3_moe", .preset = "tiny"});
    FAIL() << "a dense preset was accepted for qwen3_moe";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a mixture-of-experts preset"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_model_config({.arch = "qwen3", .preset = "tiny-moe"}), Error);
  EXPECT_THROW(make_model_config({.arch = "llama", .preset = "qwen3-30b-a3b"}), Error);
  EXPECT_EQ(make_model_config({.arch = "Qwen3MoeForCausalLM", .preset = "tiny-moe"}).model_type, "qwen3_moe");
}

}  // namespace
}  // namespace tachyon::model
