// make-model: deterministic bytes, real presets with the published parameter counts, and the
// tokenizer's vocabulary and special ids carried into config.json.
#include "tachyon/model/make_model.h"

#include <algorithm>

#include <gtest/gtest.h>
#include <unistd.h>

#include "../expected_elements.h"
#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model {
namespace {

std::filesystem::path temp_dir(const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() / ("tachyon-mm-" + std::to_string(::getpid()) + "-" + tag);
  std::filesystem::remove_all(dir);
  return dir;
}

TEST(MakeModel, SameSeedSameBytesOtherSeedOtherBytes) {
  auto a = temp_dir("a"), b = temp_dir("b"), c = temp_dir("c");
  make_model({.arch = "qwen3", .preset = "tiny", .seed = 5, .out_dir = a});
  make_model({.arch = "qwen3", .preset = "tiny", .seed = 5, .out_dir = b});
  make_model({.arch = "qwen3", .preset = "tiny", .seed = 6, .out_dir = c});
  EXPECT_EQ(read_file(a / "model.safetensors"), read_file(b / "model.safetensors"));
  EXPECT_NE(read_file(a / "model.safetensors"), read_file(c / "model.safetensors"));
  EXPECT_EQ(read_file(a / "config.json"), read_file(c / "config.json"));
  for (const auto& d : {a, b, c}) std::filesystem::remove_all(d);
}

TEST(MakeModel, RealPresetsHavePublishedSizes) {
  struct Case {
    const char* arch;
    const char* preset;
    double billions;
  };
  // Parameter counts of the published checkpoints (tied embeddings counted once).
  for (const Case& c : {Case{"llama", "llama-3.2-1b", 1.236}, Case{"llama", "llama-3.1-8b", 8.030},
                        Case{"qwen3", "qwen3-0.6b", 0.596}, Case{"qwen3", "qwen3-8b", 8.191},
                        Case{"qwen3_moe", "qwen3-30b-a3b", 30.532}, Case{"mixtral", "mixtral-8x7b", 46.703}}) {
    ModelConfig config = make_model_config({.arch = c.arch, .preset = c.preset});
    EXPECT_NEAR(tachyon::testing::expected_elements(config) / 1e9, c.billions, 0.001) << c.preset;
    EXPECT_EQ(config.torch_dtype, "bfloat16");
  }
}

TEST(MakeModel, UnknownNamesListTheChoices) {
  try {
    make_model_config({.arch = "gpt2", .preset = "tiny"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("supported: llama, mistral, qwen2, qwen3"), std::string::npos);
  }
  try {
    make_model_config({.arch = "llama", .preset = "huge"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tiny-tied"), std::string::npos);
  }
  EXPECT_THROW(make_model_config({.arch = "qwen3", .preset = "llama-3.2-1b"}), Error);
  EXPECT_THROW(make_model_config({.arch = "llama", .preset = "tiny-window"}), Error);
}

TEST(MakeModel, NumLayersKeepsThePresetsFirstLayers) {
  const ModelConfig full = make_model_config({.arch = "glm_moe_dsa", .preset = "glm-5-reduced"});
  const ModelConfig two = make_model_config({.arch = "glm_moe_dsa", .preset = "glm-5-reduced", .num_layers = 2});
  EXPECT_EQ(two.num_hidden_layers, 2);
  EXPECT_EQ(two.hidden_size, full.hidden_size);
  EXPECT_EQ(two.num_experts, full.num_experts);
  ASSERT_EQ(two.indexer_types.size(), 2u);
  EXPECT_TRUE(std::equal(two.indexer_types.begin(), two.indexer_types.end(), full.indexer_types.begin()));
  for (int64_t l = 0; l < 2; ++l) EXPECT_EQ(two.is_moe_layer(l), full.is_moe_layer(l)) << l;
  // tiny-moe's layer 0 is dense: its first layer alone is no longer a mixture-of-experts model.
  EXPECT_EQ(make_model_config({.arch = "qwen3_moe", .preset = "tiny-moe", .num_layers = 2}).num_hidden_layers, 2);
  EXPECT_THROW(make_model_config({.arch = "qwen3_moe", .preset = "tiny-moe", .num_layers = 1}), Error);
  for (int64_t bad : {int64_t{0}, full.num_hidden_layers + 1}) {
    try {
      make_model_config({.arch = "glm_moe_dsa", .preset = "glm-5-reduced", .num_layers = bad});
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--num-layers"), std::string::npos) << e.what();
    }
  }
}

TEST(MakeModel, TokenizerSetsVocabAndSpecialIds) {
  const std::filesystem::path tokenizer = std::filesystem::path(TACHYON_TOKENIZERS) / "qwen3";
  auto out = temp_dir("tok");
  ModelConfig config = make_model({.arch = "qwen3", .preset = "tiny", .tokenizer_dir = tokenizer, .out_dir = out});
  EXPECT_EQ(config.vocab_size, 151669);  // 151643 BPE ids + 26 added tokens
  EXPECT_EQ(config.eos_token_id, 151645);  // <|im_end|>
  EXPECT_TRUE(std::filesystem::exists(out / "tokenizer.json"));
  EXPECT_TRUE(std::filesystem::exists(out / "tokenizer_config.json"));
  EXPECT_EQ(ModelConfig::from_dir(out).vocab_size, 151669);
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace tachyon::model
