// The loaded weights sit on 64-byte lines (tensor/cache_line_heap.h): every matrix a CPU product
// reads, and every other array of kCacheLineHeapFrom bytes or more, in f32 and in bf16, for the
// canary's own checkpoint and the tiny MoE, latent-attention and indexer families. The list of
// arrays below is checked to hold every element the loader read, so a weight field added to
// model_weights.h without a row here fails the test instead of going unchecked.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include "../expected_elements.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/tensor/cache_line_heap.h"

namespace tachyon::model {
namespace {

template <typename T>
struct WeightArray {
  std::string name;
  const std::vector<T>* values;
  bool matrix;  // a product's weight [out, in]; else a norm, bias or score-bias vector
};

template <typename T>
void add_layer_arrays(const BasicLayerWeights<T>& lw, const std::string& prefix, std::vector<WeightArray<T>>& out) {
  auto add = [&](const char* name, const std::vector<T>& values, bool matrix) {
    out.push_back({prefix + name, &values, matrix});
  };
  add("input_norm", lw.input_norm, false);
  add("qkv", lw.qkv, true);
  add("qkv_bias", lw.qkv_bias, false);
  add("q_norm", lw.q_norm, false);
  add("k_norm", lw.k_norm, false);
  add("o_proj", lw.o_proj, true);
  add("o_proj_bias", lw.o_proj_bias, false);
  add("post_attention_norm", lw.post_attention_norm, false);
  add("gate_up", lw.gate_up, true);
  add("gate_up_bias", lw.gate_up_bias, false);
  add("down", lw.down, true);
  add("down_bias", lw.down_bias, false);
  add("router", lw.router, true);
  add("experts_gate_up", lw.experts_gate_up, true);
  add("experts_down", lw.experts_down, true);
  add("router_bias", lw.router_bias, false);
  add("shared_gate_up", lw.shared_gate_up, true);
  add("shared_down", lw.shared_down, true);
  add("q_a_proj", lw.q_a_proj, true);
  add("q_a_norm", lw.q_a_norm, false);
  add("q_b_proj", lw.q_b_proj, true);
  add("kv_a_proj", lw.kv_a_proj, true);
  add("kv_a_norm", lw.kv_a_norm, false);
  add("kv_b_proj", lw.kv_b_proj, true);
  add("indexer_wq_b", lw.indexer_wq_b, true);
  add("indexer_wk", lw.indexer_wk, true);
  add("indexer_k_norm", lw.indexer_k_norm, false);
  add("indexer_k_norm_bias", lw.indexer_k_norm_bias, false);
  add("indexer_weights_proj", lw.indexer_weights_proj, true);
}

template <typename T>
std::vector<WeightArray<T>> weight_arrays(const BasicModelWeights<T>& w) {
  std::vector<WeightArray<T>> out{{"embed_tokens", &w.embed_tokens, true},
                                  {"final_norm", &w.final_norm, false},
                                  {"lm_head", &w.lm_head, true}};
  for (size_t l = 0; l < w.layers.size(); ++l) add_layer_arrays(w.layers[l], fmt::format("layers.{}.", l), out);
  return out;
}

template <typename T>
void expect_on_cache_lines(const BasicModelWeights<T>& w) {
  int64_t elements = 0, matrices = 0;
  for (const WeightArray<T>& a : weight_arrays(w)) {
    elements += static_cast<int64_t>(a.values->size());
    if (a.values->empty()) continue;
    matrices += a.matrix;
    if (a.matrix || a.values->size() * sizeof(T) >= kCacheLineHeapFrom) {
      EXPECT_TRUE(on_cache_line(a.values->data()))
          << a.name << " (" << a.values->size() * sizeof(T) << " bytes) starts "
          << reinterpret_cast<uintptr_t>(a.values->data()) % kCacheLineBytes << " bytes into a cache line";
    }
  }
  // Every expected tensor's elements (the main model's: none of these presets has MTP modules).
  EXPECT_EQ(elements, tachyon::testing::expected_elements(w.config))
      << "an array of model_weights.h is missing from weight_arrays()";
  EXPECT_GE(matrices, 1 + 3 * w.config.num_hidden_layers);
}

void expect_loaded_on_cache_lines(const std::filesystem::path& dir) {
  const ModelConfig config = ModelConfig::from_dir(dir);
  const SafetensorsCheckpoint checkpoint(dir);
  {
    SCOPED_TRACE("f32");
    expect_on_cache_lines(load_weights(config, checkpoint));
  }
  SCOPED_TRACE("bf16");
  expect_on_cache_lines(load_weights_bf16(config, checkpoint));
}

TEST(WeightAlignment, TheCanaryCheckpointLoadsOnCacheLines) {
  const std::filesystem::path canary =
      std::filesystem::path(TACHYON_TEST_DATA).parent_path().parent_path() / "assets/canary";
  expect_loaded_on_cache_lines(canary);
}

struct TinyCase {
  const char* arch;
  const char* preset;
};

void PrintTo(const TinyCase& c, std::ostream* os) { *os << c.preset; }

class TinyFamilyAlignment : public ::testing::TestWithParam<TinyCase> {};

TEST_P(TinyFamilyAlignment, LoadsOnCacheLines) {
  const TinyCase c = GetParam();
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("tachyon-alignment-{}-{}-{}", ::getpid(), c.arch, c.preset);
  make_model({.arch = c.arch, .preset = c.preset, .seed = 5, .out_dir = dir});
  expect_loaded_on_cache_lines(dir);
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, TinyFamilyAlignment,
                         ::testing::Values(TinyCase{"llama", "tiny-bias"}, TinyCase{"qwen3_moe", "tiny-moe"},
                                           TinyCase{"mixtral", "tiny-mixtral"},
                                           TinyCase{"deepseek_v3", "tiny-deepseek"},
                                           TinyCase{"deepseek_v32", "tiny-dsa"}));

}  // namespace
}  // namespace tachyon::model
