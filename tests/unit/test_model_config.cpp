// config.json -> ModelConfig for each supported architecture, and the errors a user sees.
#include "tachyon/model/model_config.h"

#include <gtest/gtest.h>

#include "tachyon/base/check.h"
#include "tachyon/model/rope.h"

namespace tachyon::model {
namespace {

nlohmann::json base_config(const std::string& architecture) {
  return {{"architectures", {architecture}}, {"vocab_size", 1000},         {"hidden_size", 256},
          {"intermediate_size", 512},        {"num_hidden_layers", 2},      {"num_attention_heads", 8},
          {"num_key_value_heads", 2},        {"rms_norm_eps", 1e-5},        {"rope_theta", 500000.0},
          {"hidden_act", "silu"}};
}

std::string error_of(const nlohmann::json& json) {
  try {
    ModelConfig::from_json(json, "some/config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, LlamaDefaults) {
  ModelConfig c = ModelConfig::from_json(base_config("LlamaForCausalLM"));
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
}

TEST(ModelConfig, ArchitectureSpecificFields) {
  auto qwen2 = ModelConfig::from_json(base_config("Qwen2ForCausalLM"));
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.o_proj_bias);
  auto qwen3_json = base_config("Qwen3ForCausalLM");
  qwen3_json["head_dim"] = 128;
  qwen3_json["tie_word_embeddings"] = true;
  auto qwen3 = ModelConfig::from_json(qwen3_json);
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_EQ(qwen3.head_dim, 128);
  EXPECT_EQ(qwen3.q_size(), 1024);
  EXPECT_TRUE(qwen3.tie_word_embeddings);
  auto mistral_json = base_config("MistralForCausalLM");
  mistral_json["sliding_window"] = 4096;
  EXPECT_EQ(ModelConfig::from_json(mistral_json).sliding_window, 4096);
  auto llama_bias = base_config("LlamaForCausalLM");
  llama_bias["attention_bias"] = true;
  llama_bias["mlp_bias"] = true;
  auto lb = ModelConfig::from_json(llama_bias);
  EXPECT_TRUE(lb.qkv_bias && lb.o_proj_bias && lb.mlp_bias);
}

TEST(ModelConfig, MissingKvHeadsMeansMultiHead) {
  auto json = base_config("LlamaForCausalLM");
  json.erase("num_key_value_heads");
  EXPECT_EQ(ModelConfig::from_json(json).num_key_value_heads, 8);
}

TEST(ModelConfig, RopeScalingVariants) {
  auto json = base_config("LlamaForCausalLM");
  json["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  auto c = ModelConfig::from_json(json);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  json["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // the older key name
  EXPECT_EQ(ModelConfig::from_json(json).rope_scaling.type, RopeScalingType::kLinear);
  json.erase("rope_scaling");
  json.erase("rope_theta");
  json["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};  // transformers 5 spelling
  EXPECT_DOUBLE_EQ(ModelConfig::from_json(json).rope_theta, 1e6);
}

TEST(ModelConfig, RopeFrequenciesFollowScaling) {
  auto json = base_config("LlamaForCausalLM");
  json["rope_theta"] = 10000.0;
  auto plain = rope_inv_freq(ModelConfig::from_json(json));
  ASSERT_EQ(plain.size(), 16u);
  EXPECT_FLOAT_EQ(plain[0], 1.0f);
  EXPECT_NEAR(plain[8], 1.0f / 100.0f, 1e-7);  // 10000^(-16/32)
  json["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  auto linear = rope_inv_freq(ModelConfig::from_json(json));
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_FLOAT_EQ(linear[i], plain[i] / 4.0f);
  json["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 256}};
  auto llama3 = rope_inv_freq(ModelConfig::from_json(json));
  EXPECT_FLOAT_EQ(llama3[0], plain[0]);                 // short wavelength: kept
  EXPECT_FLOAT_EQ(llama3[15], plain[15] / 8.0f);        // long wavelength: divided by factor
  bool blended = false;                                 // the middle band lies strictly between
  for (size_t i = 0; i < plain.size(); ++i) blended |= llama3[i] < plain[i] && llama3[i] > plain[i] / 8.0f;
  EXPECT_TRUE(blended);
}

TEST(ModelConfig, ErrorsNameTheFileAndField) {
  EXPECT_NE(error_of(base_config("GPT2LMHeadModel")).find("unknown architecture 'GPT2LMHeadModel'"), std::string::npos);
  EXPECT_NE(error_of(base_config("GPT2LMHeadModel")).find("some/config.json"), std::string::npos);
  auto json = base_config("LlamaForCausalLM");
  json.erase("hidden_size");
  EXPECT_NE(error_of(json).find("'hidden_size' is missing"), std::string::npos);
  json = base_config("LlamaForCausalLM");
  json["num_key_value_heads"] = 3;
  EXPECT_NE(error_of(json).find("multiple of num_key_value_heads"), std::string::npos);
  json = base_config("LlamaForCausalLM");
  json["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_NE(error_of(json).find("unsupported rope_scaling type 'yarn'"), std::string::npos);
  json = base_config("LlamaForCausalLM");
  json["hidden_act"] = "gelu";
  EXPECT_NE(error_of(json).find("hidden_act 'gelu'"), std::string::npos);
}

TEST(ModelConfig, JsonRoundTrip) {
  auto json = base_config("Qwen3ForCausalLM");
  json["head_dim"] = 64;
  json["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
  auto c = ModelConfig::from_json(json);
  auto again = ModelConfig::from_json(c.to_json());
  EXPECT_EQ(again.to_json(), c.to_json());
  EXPECT_EQ(again.head_dim, 64);
  EXPECT_EQ(again.rope_scaling.type, RopeScalingType::kLinear);
}

}  // namespace
}  // namespace tachyon::model
