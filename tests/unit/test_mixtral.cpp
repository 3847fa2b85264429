// Mixtral (MixtralForCausalLM) on the CPU reference: Mistral's attention with every layer a
// mixture of experts (model/moe.h's softmax top-k router, always renormalized). Covers config.json
// (defaults, round trip, the training-only fields), the checkpoint names (block_sparse_moe.gate,
// experts.{e}.w1 / w3 / w2) and their stacked layout, the router against a hand computation, one
// layer against the naive per-expert loop (tests/moe_test_util.h) fed straight from the checkpoint
// tensors, the engine against greedy_generate, and what the CUDA runner and --tp make of it.
// The transformers goldens: tests/data/goldens/mixtral_manifest.json.
#include "tachyon/model/moe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "../architecture_checks.h"
#include "../moe_test_util.h"
#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/model_config.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/model/safetensors.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/app/runner_factory.h"

namespace tachyon::model {
namespace {

using Shape = std::vector<int64_t>;
using testing::make_weights;
using testing::max_abs;
using testing::max_abs_diff;
using testing::NaiveExpert;
using testing::random_values;

// A config.json with only the fields MixtralConfig has no default for in our reader.
nlohmann::json mixtral_json() {
  return {{"architectures", {"MixtralForCausalLM"}},
          {"vocab_size", 1000},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"num_hidden_layers", 3},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 2}};
}

std::string error_of(const nlohmann::json& json) {
  try {
    ModelConfig::from_json(json, "mixtral/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::filesystem::path temp_dir(const std::string& tag) { return testing::fresh_temp_dir("mixtral-" + tag); }
using testing::tensor_f32;

std::string moe_prefix(int64_t layer) { return "model.layers." + std::to_string(layer) + ".block_sparse_moe."; }

TEST(MixtralConfig, MissingFieldsTakeMixtralConfigDefaults) {
  const ModelConfig c = ModelConfig::from_json(mixtral_json());
  EXPECT_EQ(c.architecture, "MixtralForCausalLM");
  EXPECT_EQ(c.model_type, "mixtral");
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 96);  // intermediate_size is each expert's width
  EXPECT_EQ(c.router, RouterKind::kSoftmaxTopK);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.n_shared_experts, 0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.max_position_embeddings, 4096 * 32);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_FALSE(c.qk_norm || c.qkv_bias || c.o_proj_bias || c.mlp_bias);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) EXPECT_TRUE(c.is_moe_layer(l)) << l;
  EXPECT_NE(supported_model_types().find("qwen3_moe, mixtral"), std::string::npos) << supported_model_types();
  EXPECT_EQ(architecture_named("mixtral"), "MixtralForCausalLM");
}

TEST(MixtralConfig, ReadsItsFieldsAndRoundTrips) {
  nlohmann::json json = mixtral_json();
  json["num_local_experts"] = 6;
  json["num_experts_per_tok"] = 3;
  json["head_dim"] = 32;  // explicit, beside hidden / heads = 16
  json["sliding_window"] = 4096;
  json["rope_theta"] = 500000.0;
  json["rms_norm_eps"] = 1e-6;
  json["max_position_embeddings"] = 32768;
  json["bos_token_id"] = 1;
  json["eos_token_id"] = 2;
  // Training only (accepted, ignored), and fields Mixtral's modules never read.
  json["router_jitter_noise"] = 0.1;
  json["router_aux_loss_coef"] = 0.02;
  json["output_router_logits"] = true;
  json["norm_topk_prob"] = false;  // MixtralTopKRouter always renormalizes
  json["attention_bias"] = true;   // MixtralAttention has no biases
  const ModelConfig c = ModelConfig::from_json(json);
  EXPECT_EQ(c.num_experts, 6);
  EXPECT_EQ(c.num_experts_per_tok, 3);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.q_size(), 128);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_FALSE(c.qkv_bias || c.o_proj_bias);

  const nlohmann::json written = c.to_json();
  EXPECT_EQ(written["model_type"], "mixtral");
  EXPECT_EQ(written["num_local_experts"], 6);
  EXPECT_EQ(written["num_experts_per_tok"], 3);
  EXPECT_EQ(written["intermediate_size"], 96);
  EXPECT_EQ(written["sliding_window"], 4096);
  EXPECT_FALSE(written.contains("num_experts") || written.contains("moe_intermediate_size") ||
               written.contains("norm_topk_prob") || written.contains("decoder_sparse_step"));
  const ModelConfig again = ModelConfig::from_json(written);
  EXPECT_EQ(again.to_json(), written);
  EXPECT_EQ(again.num_experts, 6);
  EXPECT_EQ(again.moe_intermediate_size, 96);
  EXPECT_EQ(again.sliding_window, 4096);
  // sliding_window null: no window, written back as null.
  json["sliding_window"] = nullptr;
  const ModelConfig full = ModelConfig::from_json(json);
  EXPECT_FALSE(full.sliding_window.has_value());
  EXPECT_TRUE(full.to_json()["sliding_window"].is_null());
}

TEST(MixtralConfig, ErrorsNameTheField) {
  nlohmann::json json = mixtral_json();
  json["num_experts_per_tok"] = 9;
  EXPECT_NE(error_of(json).find("num_experts_per_tok (9) exceeds num_local_experts (8)"), std::string::npos)
      << error_of(json);
  json = mixtral_json();
  json["num_local_experts"] = 0;
  EXPECT_NE(error_of(json).find("'num_local_experts' must be at least 1"), std::string::npos) << error_of(json);
  json = mixtral_json();
  json["hidden_act"] = "gelu";
  EXPECT_NE(error_of(json).find("hidden_act 'gelu'"), std::string::npos) << error_of(json);
}

TEST(MixtralWeights, ExpectedTensorsUseTheCheckpointNames) {
  const ModelConfig c = ModelConfig::from_json(mixtral_json());
  std::map<std::string, Shape> tensors;
  for (auto& [name, shape] : expected_tensors(c)) tensors.emplace(name, shape);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string prefix = moe_prefix(l);
    EXPECT_EQ(tensors.at(prefix + "gate.weight"), (Shape{8, 64})) << l;
    for (int64_t e = 0; e < c.num_experts; ++e) {
      const std::string expert = prefix + "experts." + std::to_string(e) + ".";
      EXPECT_EQ(tensors.at(expert + "w1.weight"), (Shape{96, 64})) << l << " " << e;  // gate
      EXPECT_EQ(tensors.at(expert + "w3.weight"), (Shape{96, 64})) << l << " " << e;  // up
      EXPECT_EQ(tensors.at(expert + "w2.weight"), (Shape{64, 96})) << l << " " << e;  // down
    }
    EXPECT_EQ(tensors.at("model.layers." + std::to_string(l) + ".self_attn.q_proj.weight"), (Shape{64, 64}));
  }
  for (const auto& [name, shape] : tensors) {
    EXPECT_EQ(name.find(".mlp."), std::string::npos) << name;  // Qwen3-MoE's spelling, and the dense MLP's
    EXPECT_EQ(name.find("q_norm"), std::string::npos) << name;
    EXPECT_EQ(name.find(".bias"), std::string::npos) << name;
  }
  EXPECT_FALSE(tensors.count(moe_prefix(0) + "experts.8.w1.weight"));
  // embed, final norm, lm_head; per layer 2 norms, q/k/v/o, the router and 3 per expert.
  EXPECT_EQ(tensors.size(), 3 + 3 * (6 + 1 + 3 * 8));
}

TEST(MixtralWeights, ExpertsAreStackedAsW1ThenW3AndW2) {
  const auto dir = temp_dir("layout");
  make_model({.arch = "mixtral", .preset = "tiny-mixtral", .seed = 4, .dtype = DType::kBF16, .out_dir = dir});
  const ModelConfig c = ModelConfig::from_dir(dir);
  const SafetensorsCheckpoint checkpoint(dir);
  const ModelWeights w = load_weights(c, checkpoint);
  const Bf16ModelWeights b = load_weights_bf16(c, checkpoint);
  const int64_t h = c.hidden_size, inter = c.moe_intermediate_size, experts = c.num_experts;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    EXPECT_TRUE(lw.gate_up.empty() && lw.down.empty() && lw.q_norm.empty() && lw.qkv_bias.empty()) << l;
    ASSERT_EQ(lw.router.size(), static_cast<size_t>(experts * h));
    ASSERT_EQ(lw.experts_gate_up.size(), static_cast<size_t>(experts * 2 * inter * h));
    ASSERT_EQ(lw.experts_down.size(), static_cast<size_t>(experts * h * inter));
    EXPECT_EQ(lw.router, tensor_f32(checkpoint, moe_prefix(l) + "gate.weight"));
    for (int64_t e = 0; e < experts; ++e) {
      const std::string expert = moe_prefix(l) + "experts." + std::to_string(e) + ".";
      const auto w1 = tensor_f32(checkpoint, expert + "w1.weight");
      const auto w3 = tensor_f32(checkpoint, expert + "w3.weight");
      const auto w2 = tensor_f32(checkpoint, expert + "w2.weight");
      const float* stacked = lw.experts_gate_up.data() + e * 2 * inter * h;  // [w1; w3] of expert e
      EXPECT_TRUE(std::equal(w1.begin(), w1.end(), stacked)) << l << " " << e;
      EXPECT_TRUE(std::equal(w3.begin(), w3.end(), stacked + inter * h)) << l << " " << e;
      EXPECT_TRUE(std::equal(w2.begin(), w2.end(), lw.experts_down.data() + e * h * inter)) << l << " " << e;
      // A bf16 checkpoint reaches Bf16ModelWeights bit for bit, in the same layout.
      const auto& bw = b.layers[static_cast<size_t>(l)];
      EXPECT_EQ(std::memcmp(bw.experts_gate_up.data() + e * 2 * inter * h + inter * h,
                            checkpoint.at(expert + "w3.weight").data, static_cast<size_t>(inter * h) * 2),
                0);
      EXPECT_EQ(std::memcmp(bw.experts_down.data() + e * h * inter, checkpoint.at(expert + "w2.weight").data,
                            static_cast<size_t>(h * inter) * 2),
                0);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(MixtralWeights, AQwenMoeCheckpointIsRefusedByName) {
  const auto dir = temp_dir("qwen-names");
  make_model({.arch = "mixtral", .preset = "tiny-mixtral", .out_dir = dir});
  ModelConfig c = ModelConfig::from_dir(dir);
  const SafetensorsCheckpoint checkpoint(dir);
  c.architecture = "Qwen3MoeForCausalLM";  // the same shapes read with Qwen3-MoE's names
  c.model_type = "qwen3_moe";
  try {
    load_weights(c, checkpoint);
    FAIL() << "Mixtral tensors were read as Qwen3-MoE ones";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'model.layers.0.mlp.gate.weight'"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(MixtralRouter, EqualsAHandComputation) {
  // Router = identity on hidden 8, so the router logits are x itself: (0.5, -1, 2, 0, 1.5, -0.5,
  // 0.25, 1). Top-2 are experts 2 and 4; renormalized, their weights are sigmoid(2 - 1.5) and
  // 1 - sigmoid(0.5), with no epsilon.
  ModelConfig c = ModelConfig::from_json(
      {{"architectures", {"MixtralForCausalLM"}}, {"vocab_size", 16}, {"hidden_size", 8}, {"intermediate_size", 5},
       {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 1}});
  const int64_t h = c.hidden_size, inter = c.moe_intermediate_size, experts = c.num_experts;
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 0.0f, 1.5f, -0.5f, 0.25f, 1.0f};
  const float w2 = 0.6224593f, w4 = 0.3775407f;

  const auto chosen = route_token(x, c.num_experts_per_tok, c.norm_topk_prob);
  ASSERT_EQ(chosen.size(), 2u);
  EXPECT_EQ(chosen[0].expert, 2);
  EXPECT_EQ(chosen[1].expert, 4);
  EXPECT_NEAR(chosen[0].weight, w2, 1e-7f);
  EXPECT_NEAR(chosen[1].weight, w4, 1e-7f);

  LayerWeights w;
  w.router.assign(static_cast<size_t>(experts * h), 0.0f);
  for (int64_t e = 0; e < experts; ++e) w.router[static_cast<size_t>(e * h + e)] = 1.0f;
  std::mt19937 gen(5);
  w.experts_gate_up = random_values(gen, static_cast<size_t>(experts * 2 * inter * h), 0.5f);
  w.experts_down = random_values(gen, static_cast<size_t>(experts * h * inter), 0.5f);
  std::vector<float> logits;
  const std::vector<float> out = moe_mlp(c, w, x, 1, &logits);
  EXPECT_EQ(logits, x);
  std::vector<float> out2(static_cast<size_t>(h)), out4(static_cast<size_t>(h)), expected(static_cast<size_t>(h));
  expert_mlp(c, w, 2, x.data(), out2.data());
  expert_mlp(c, w, 4, x.data(), out4.data());
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = w2 * out2[i] + w4 * out4[i];
  EXPECT_LT(max_abs_diff(out, expected), 1e-6f * max_abs(expected));
}

// One layer of a make-model'd tiny-mixtral, against the naive loop fed the checkpoint's own
// w1 / w3 / w2 tensors: the names, the stacking and the routing together.
TEST(MixtralLayer, MatchesANaivePerExpertLoopOnTheCheckpointTensors) {
  const auto dir = temp_dir("naive");
  make_model({.arch = "mixtral", .preset = "tiny-mixtral", .seed = 5, .out_dir = dir});
  const ModelConfig c = ModelConfig::from_dir(dir);
  const SafetensorsCheckpoint checkpoint(dir);
  const ModelWeights w = load_weights(c, checkpoint);
  const int64_t n = 7, h = c.hidden_size, layer = 2;
  std::vector<NaiveExpert> experts;
  for (int64_t e = 0; e < c.num_experts; ++e) {
    const std::string expert = moe_prefix(layer) + "experts." + std::to_string(e) + ".";
    experts.push_back({tensor_f32(checkpoint, expert + "w1.weight"), tensor_f32(checkpoint, expert + "w3.weight"),
                       tensor_f32(checkpoint, expert + "w2.weight")});
  }
  std::mt19937 gen(13);
  const std::vector<float> x = random_values(gen, static_cast<size_t>(n * h), 1.0f);
  const std::vector<float> out = moe_mlp(c, w.layers[layer], x, n);
  const std::vector<float> expected =
      testing::naive_moe(x, n, h, c.moe_intermediate_size, tensor_f32(checkpoint, moe_prefix(layer) + "gate.weight"),
                         experts, c.num_experts_per_tok, /*norm_topk_prob=*/true);
  EXPECT_LT(max_abs_diff(out, expected), 1e-5f * max_abs(expected));
  std::filesystem::remove_all(dir);
}

TEST(MixtralModel, EveryLayerRunsTheExperts) {
  DenseModel model(make_weights("mixtral", "tiny-mixtral"));
  const ModelConfig& c = model.config();
  std::vector<std::string> seen;
  auto hook = [&](std::string_view name, int64_t layer, std::span<const float>) {
    seen.push_back(std::string(name) + "@" + std::to_string(layer));
  };
  SequenceKvCache cache(c, 8);
  model.forward(std::vector<int32_t>{1, 2, 3, 4, 5}, cache, false, hook);
  auto has = [&](const std::string& s) { return std::find(seen.begin(), seen.end(), s) != seen.end(); };
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    const std::string at = "@" + std::to_string(layer);
    EXPECT_TRUE(has("router_logits" + at) && has("moe_out" + at)) << layer;
    EXPECT_FALSE(has("mlp_out" + at)) << layer;
  }
}

// The engine (paged KV cache, chunked prefill) gives each prompt the reference loop's greedy
// tokens, without and with a sliding window (Mistral's attention).
TEST(MixtralModel, EngineMatchesGreedyGenerate) {
  ModelWeights weights = make_weights("mixtral", "tiny-mixtral");
  testing::expect_engine_matches_greedy_generate(DenseModel(weights), "tiny-mixtral");
  weights.config.sliding_window = 8;
  testing::expect_engine_matches_greedy_generate(DenseModel(std::move(weights)), "tiny-mixtral, window 8");
}

TEST(MixtralModel, TheGpuShapesAreServedAndTensorParallelismRunsOnCpuRanks) {
  for (const char* preset : {"tiny-gpu-mixtral", "tiny-gpu-mixtral-all"}) {
    EXPECT_EQ(app::cuda_unsupported_reason(make_model_config({.arch = "mixtral", .preset = preset})), "") << preset;
  }
  EXPECT_EQ(app::cuda_unsupported_reason(make_model_config({.arch = "mixtral", .preset = "mixtral-8x7b"})), "");
  const ModelConfig c = make_model_config({.arch = "mixtral", .preset = "tiny-mixtral"});
  EXPECT_NO_THROW(check_tp_size(c, 1));
  EXPECT_NO_THROW(check_tp_size(c, 4));  // test_tp_families.cpp runs it
  EXPECT_NE(cuda_tp_unsupported_reason(c, 2).find("the GPU decoder cannot serve MixtralForCausalLM: head_dim 16"), std::string::npos);
  const ModelConfig gpu = make_model_config({.arch = "mixtral", .preset = "tiny-gpu-mixtral"});
  EXPECT_EQ(cuda_tp_unsupported_reason(gpu, 4), "");  // tests/gpu/test_tp_cuda_runner.cpp runs tiny-gpu-mixtral-all
  const auto dir = temp_dir("runner");
  make_model({.arch = "mixtral", .preset = "tiny-mixtral", .seed = 1, .out_dir = dir});
  testing::expect_cpu_load_and_tp_served(dir, "mixtral");
  std::filesystem::remove_all(dir);
}

TEST(MixtralMakeModel, WritesAConfigTransformersReads) {
  const auto dir = temp_dir("config");
  make_model({.arch = "mixtral", .preset = "tiny-mixtral", .out_dir = dir});
  const nlohmann::json json = read_json_file(dir / "config.json");
  EXPECT_EQ(json["architectures"], nlohmann::json::array({"MixtralForCausalLM"}));
  EXPECT_EQ(json["model_type"], "mixtral");
  EXPECT_EQ(json["num_local_experts"], 8);
  EXPECT_EQ(json["num_experts_per_tok"], 2);
  EXPECT_EQ(json["intermediate_size"], 32);
  EXPECT_TRUE(json["sliding_window"].is_null());
  EXPECT_EQ(json["attention_bias"], false);
  EXPECT_EQ(json["output_router_logits"], false);
  EXPECT_EQ(json["rope_theta"], 1e6);
  std::filesystem::remove_all(dir);

  const ModelConfig gpu = make_model_config({.arch = "mixtral", .preset = "tiny-gpu-mixtral"});
  EXPECT_EQ(gpu.hidden_size, 256);
  EXPECT_EQ(gpu.head_dim, 64);
  EXPECT_EQ(gpu.num_experts, 8);
  EXPECT_EQ(gpu.num_experts_per_tok, 2);
  EXPECT_EQ(make_model_config({.arch = "mixtral", .preset = "tiny-gpu-mixtral-all"}).num_experts_per_tok, 8);
  const ModelConfig real = make_model_config({.arch = "MixtralForCausalLM", .preset = "mixtral-8x7b"});
  EXPECT_EQ(real.torch_dtype, "bfloat16");
  EXPECT_EQ(real.moe_intermediate_size, 14336);
  EXPECT_EQ(real.num_key_value_heads, 8);
  EXPECT_DOUBLE_EQ(real.rope_theta, 1e6);
}

TEST(MixtralMakeModel, PresetsAndArchitecturesMustAgree) {
  try {
    make_model_config({.arch = "mixtral", .preset = "tiny"});
    FAIL() << "a dense preset was accepted for mixtral";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a Mixtral shape"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_model_config({.arch = "mixtral", .preset = "tiny-moe"}), Error);
  EXPECT_THROW(make_model_config({.arch = "qwen3_moe", .preset = "tiny-mixtral"}), Error);
  EXPECT_THROW(make_model_config({.arch = "mistral", .preset = "mixtral-8x7b"}), Error);
}

}  // namespace
}  // namespace tachyon::model
