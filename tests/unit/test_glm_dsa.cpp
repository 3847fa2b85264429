// GLM-5 (transformers' GlmMoeDsaForCausalLM, model_type glm_moe_dsa) on the CPU reference: what
// differs from DeepSeek-V3.2 (tests/unit/test_dsa.cpp covers the shared DSA machinery). The
// config's defaults and per-layer indexer types (indexer_types, index_topk_pattern, the freq/offset
// schedule) and their refusals; no indexer tensors on "shared" layers; the indexer's interleaved
// rope against a double reimplementation (and shown to differ from rotate-half); shared layers
// attending exactly the previous full layer's selection, with no index keys cached for them;
// chunked prefill and the engine against the one-sequence reference; --tp 2 on CPU ranks loads.
// Run: build/tests/unit_glm_dsa
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "../architecture_checks.h"
#include "../model_test_util.h"
#include "../moe_test_util.h"
#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/model/attention_backend.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/dsa_indexer.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/mla.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/model/rope.h"
#include "tachyon/model/safetensors.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/paged_attention_backend.h"
#include "tachyon/app/runner_factory.h"

namespace tachyon::model {
namespace {

using testing::prompt_of;
using testing::relative_error;
using testing::layer_norm_double;
using testing::linear_double;
using testing::rope_double;
using testing::sequence_logits;

constexpr IndexerType kF = IndexerType::kFull;
constexpr IndexerType kS = IndexerType::kShared;

std::filesystem::path temp_dir(const std::string& tag) { return testing::fresh_temp_dir("glm-dsa-" + tag); }

ModelWeights tiny_glm_weights(uint64_t seed = 0) { return testing::make_weights("glm_moe_dsa", "tiny-glm-dsa", seed); }

// A config.json of GLM-5 with only the required fields (everything else takes GlmMoeDsaConfig's defaults).
nlohmann::json minimal_json(int64_t layers) {
  return {{"architectures", {"GlmMoeDsaForCausalLM"}}, {"model_type", "glm_moe_dsa"}, {"vocab_size", 512},
          {"hidden_size", 64},  {"intermediate_size", 128}, {"num_hidden_layers", layers},
          {"num_attention_heads", 4}};
}

// ---- Config -------------------------------------------------------------------------------------

TEST(GlmDsaConfig, PresetRoundTripsWithItsIndexerTypes) {
  const ModelConfig c = make_model_config({.arch = "glm_moe_dsa", .preset = "tiny-glm-dsa"});
  EXPECT_EQ(c.architecture, "GlmMoeDsaForCausalLM");
  EXPECT_EQ(c.model_type, "glm_moe_dsa");
  EXPECT_TRUE(c.is_mla());
  EXPECT_TRUE(c.has_sparse_attention());
  EXPECT_EQ(c.index_rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(c.indexer_types, (std::vector<IndexerType>{kF, kS, kF, kS}));
  EXPECT_EQ(c.index_n_heads, 16);
  EXPECT_EQ(c.index_head_dim, 16);
  EXPECT_EQ(c.index_topk, 8);
  for (int64_t layer = 0; layer < 4; ++layer) EXPECT_EQ(c.has_indexer(layer), layer % 2 == 0) << layer;
  EXPECT_TRUE(c.has_indexer(4)) << "an MTP module's layer, past the main layers, runs its own indexer";

  const nlohmann::json json = c.to_json();
  EXPECT_EQ(json["architectures"][0], "GlmMoeDsaForCausalLM");
  EXPECT_EQ(json["model_type"], "glm_moe_dsa");
  EXPECT_EQ(json["indexer_types"], (nlohmann::json{"full", "shared", "full", "shared"}));
  const ModelConfig back = ModelConfig::from_json(json);
  EXPECT_EQ(back.indexer_types, c.indexer_types);
  EXPECT_EQ(back.index_rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(back.to_json(), json);

  // DeepSeek-V3.2 keeps the rotate-half indexer rope and no per-layer types.
  const ModelConfig v32 = make_model_config({.arch = "deepseek_v32", .preset = "tiny-dsa"});
  EXPECT_EQ(v32.index_rope_layout, RopeLayout::kRotateHalf);
  EXPECT_TRUE(v32.indexer_types.empty());
  EXPECT_FALSE(v32.to_json().contains("indexer_types"));
  EXPECT_TRUE(v32.has_indexer(1));
  EXPECT_THROW(make_model_config({.arch = "glm_moe_dsa", .preset = "tiny-dsa"}), Error);
  EXPECT_THROW(make_model_config({.arch = "deepseek_v32", .preset = "tiny-glm-dsa"}), Error);
  EXPECT_THROW(make_model_config({.arch = "glm_moe_dsa", .preset = "tiny-deepseek"}), Error);
  EXPECT_EQ(architecture_named("glm_moe_dsa"), "GlmMoeDsaForCausalLM");
}

TEST(GlmDsaConfig, AbsentFieldsTakeGlmMoeDsaConfigsDefaults) {
  const ModelConfig d = ModelConfig::from_json(minimal_json(6));
  EXPECT_EQ(d.q_lora_rank, 2048);
  EXPECT_EQ(d.kv_lora_rank, 512);
  EXPECT_EQ(d.qk_nope_head_dim, 192);
  EXPECT_EQ(d.qk_rope_head_dim, 64);
  EXPECT_EQ(d.v_head_dim, 256);
  EXPECT_EQ(d.head_dim, 256);
  EXPECT_EQ(d.num_experts, 256);
  EXPECT_EQ(d.num_experts_per_tok, 8);
  EXPECT_EQ(d.moe_intermediate_size, 2048);
  EXPECT_EQ(d.n_shared_experts, 1);
  EXPECT_EQ(d.n_group, 1);
  EXPECT_EQ(d.topk_group, 1);
  EXPECT_EQ(d.first_k_dense_replace, 3);
  EXPECT_DOUBLE_EQ(d.routed_scaling_factor, 2.5);
  EXPECT_TRUE(d.norm_topk_prob);
  EXPECT_EQ(d.index_n_heads, 32);
  EXPECT_EQ(d.index_head_dim, 128);
  EXPECT_EQ(d.index_topk, 2048);
  EXPECT_DOUBLE_EQ(d.rms_norm_eps, 1e-5);
  EXPECT_EQ(d.max_position_embeddings, 202752);
  EXPECT_TRUE(d.rope_interleave);
  EXPECT_EQ(d.index_rope_layout, RopeLayout::kInterleaved);
  EXPECT_EQ(d.indexer_types, std::vector<IndexerType>(6, kF)) << "index_topk_freq 1: every layer full";

  const ModelConfig glm5 = make_model_config({.arch = "glm_moe_dsa", .preset = "glm-5-reduced"});
  EXPECT_EQ(glm5.hidden_size, 6144);
  EXPECT_EQ(glm5.num_hidden_layers, 4);
  EXPECT_EQ(glm5.head_dim, 256);
  EXPECT_EQ(glm5.v_head_dim, 256);
  EXPECT_EQ(glm5.index_n_heads, 32);
  EXPECT_EQ(glm5.num_experts, 64);
  EXPECT_EQ(glm5.indexer_types, std::vector<IndexerType>(4, kF));
}

TEST(GlmDsaConfig, IndexerTypesComeFromThePatternOrTheSchedule) {
  nlohmann::json json = minimal_json(6);
  json["index_topk_freq"] = 2;  // full when max(i - 2 + 1, 0) % 2 == 0
  EXPECT_EQ(ModelConfig::from_json(json).indexer_types, (std::vector<IndexerType>{kF, kF, kS, kF, kS, kF}));
  json["index_skip_topk_offset"] = 1;  // full when i % 2 == 0
  EXPECT_EQ(ModelConfig::from_json(json).indexer_types, (std::vector<IndexerType>{kF, kS, kF, kS, kF, kS}));
  json["index_topk_pattern"] = "FSSFFS";  // the pattern overrides the schedule ...
  EXPECT_EQ(ModelConfig::from_json(json).indexer_types, (std::vector<IndexerType>{kF, kS, kS, kF, kF, kS}));
  json["indexer_types"] = {"full", "full", "shared", "shared", "shared", "full"};  // ... and the list both
  EXPECT_EQ(ModelConfig::from_json(json).indexer_types, (std::vector<IndexerType>{kF, kF, kS, kS, kS, kF}));

  nlohmann::json bad = minimal_json(4);
  bad["indexer_types"] = {"full", "shared"};  // not one per layer
  EXPECT_THROW(ModelConfig::from_json(bad), Error);
  bad["indexer_types"] = {"shared", "full", "full", "full"};  // nothing for layer 0 to share
  EXPECT_THROW(ModelConfig::from_json(bad), Error);
  bad["indexer_types"] = {"full", "sparse", "full", "full"};
  EXPECT_THROW(ModelConfig::from_json(bad), Error);
  bad.erase("indexer_types");
  bad["index_topk_pattern"] = "FSX";
  EXPECT_THROW(ModelConfig::from_json(bad), Error);
  bad = minimal_json(4);
  bad["rope_interleave"] = false;  // GlmMoeDsaAttention always interleaves
  EXPECT_THROW(ModelConfig::from_json(bad), Error);
  bad = minimal_json(4);
  bad["indexer_rope_interleave"] = false;  // so does GlmMoeDsaIndexer
  EXPECT_THROW(ModelConfig::from_json(bad), Error);
  nlohmann::json ok = minimal_json(4);
  ok["indexer_rope_interleave"] = true;  // what GLM-5's config.json says
  EXPECT_NO_THROW(ModelConfig::from_json(ok));
}

TEST(GlmDsaConfig, MlpLayerTypesOverrideFirstKDenseReplace) {
  nlohmann::json json = minimal_json(4);
  json["first_k_dense_replace"] = 3;
  json["mlp_layer_types"] = {"dense", "sparse", "sparse", "sparse"};  // transformers reads the list
  const ModelConfig c = ModelConfig::from_json(json);
  EXPECT_EQ(c.first_k_dense_replace, 1);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  json["mlp_layer_types"] = {"dense", "sparse", "dense", "sparse"};  // not a dense prefix: refused, not guessed
  EXPECT_THROW(ModelConfig::from_json(json), Error);
  json["mlp_layer_types"] = {"dense", "sparse"};
  EXPECT_THROW(ModelConfig::from_json(json), Error);
}

// ---- Weights ------------------------------------------------------------------------------------

TEST(GlmDsaWeights, SharedLayersHaveNoIndexerTensors) {
  const ModelConfig c = make_model_config({.arch = "glm_moe_dsa", .preset = "tiny-glm-dsa"});
  std::map<std::string, std::vector<int64_t>> tensors;
  for (const auto& [name, shape] : expected_tensors(c)) tensors[name] = shape;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const bool full = l % 2 == 0;
    for (const char* suffix : {"wq_b.weight", "wk.weight", "k_norm.weight", "k_norm.bias", "weights_proj.weight"}) {
      EXPECT_EQ(tensors.count(p + "self_attn.indexer." + suffix), full ? 1u : 0u) << p << suffix;
    }
    EXPECT_EQ(tensors.count(p + "self_attn.kv_a_proj_with_mqa.weight"), 1u) << "layer " << l << " keeps its MLA";
  }
  EXPECT_EQ(tensors["model.layers.2.self_attn.indexer.wq_b.weight"], (std::vector<int64_t>{16 * 16, 32}));
  EXPECT_EQ(tensors["model.layers.2.self_attn.indexer.weights_proj.weight"], (std::vector<int64_t>{16, 64}));
  const ModelWeights w = tiny_glm_weights();
  EXPECT_EQ(w.layers[0].indexer_wq_b.size(), size_t{16 * 16 * 32});
  EXPECT_TRUE(w.layers[1].indexer_wq_b.empty());
  EXPECT_TRUE(w.layers[3].indexer_weights_proj.empty());

  // The checkpoint and the config must agree on which layers have an indexer, both ways.
  const auto dir = temp_dir("mismatch");
  make_model({.arch = "glm_moe_dsa", .preset = "tiny-glm-dsa", .seed = 2, .out_dir = dir});
  nlohmann::json json = read_json_file(dir / "config.json");
  json["indexer_types"] = {"full", "full", "full", "shared"};  // layer 1's indexer is missing
  write_file(dir / "config.json", json.dump());
  EXPECT_THROW(load_weights(ModelConfig::from_dir(dir), SafetensorsCheckpoint(dir)), Error);
  json["indexer_types"] = {"full", "shared", "shared", "shared"};  // layer 2's indexer is unexpected
  write_file(dir / "config.json", json.dump());
  EXPECT_THROW(load_weights(ModelConfig::from_dir(dir), SafetensorsCheckpoint(dir)), Error);
  std::filesystem::remove_all(dir);
}

// ---- The indexer's interleaved rope -------------------------------------------------------------

TEST(GlmDsaIndexer, InterleavedRopeMatchesADoubleReimplementation) {
  const ModelWeights weights = tiny_glm_weights(3);
  const ModelConfig& c = weights.config;
  const LayerWeights& w = weights.layers[2];
  const int64_t n = 13, heads = c.index_n_heads, dim = c.index_head_dim;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * c.hidden_size));
  for (float& v : x) v = normal(rng);
  std::vector<int64_t> positions(static_cast<size_t>(n));
  std::iota(positions.begin(), positions.end(), 17);  // past 0, so every pair really rotates
  const std::vector<float> inv_freq = rope_inv_freq(c);
  const MlaLatentProjections mla = mla_project_latent(c, w, inv_freq, x, positions);
  const DsaIndexerProjections got = dsa_indexer_project(c, w, inv_freq, x, mla.q_lora, positions);

  std::vector<double> q = linear_double(w.indexer_wq_b, mla.q_lora, n, c.q_lora_rank, heads * dim);
  rope_double(c, q, positions, heads, dim, /*interleaved=*/true);
  std::vector<double> k = linear_double(w.indexer_wk, x, n, c.hidden_size, dim);
  layer_norm_double(k, w.indexer_k_norm, w.indexer_k_norm_bias, n, dim);
  rope_double(c, k, positions, 1, dim, /*interleaved=*/true);
  EXPECT_LT(relative_error(got.q, q), 1e-5);
  EXPECT_LT(relative_error(got.k, k), 1e-5);

  // The layout matters: DeepSeek-V3.2's rotate-half on the same weights is far from it.
  ModelConfig rotate_half = c;
  rotate_half.index_rope_layout = RopeLayout::kRotateHalf;
  const DsaIndexerProjections other = dsa_indexer_project(rotate_half, w, inv_freq, x, mla.q_lora, positions);
  EXPECT_GT(relative_error(other.q, q), 1e-2);
  EXPECT_GT(relative_error(other.k, k), 1e-2);
}

// ---- Shared layers ------------------------------------------------------------------------------

// Passes every call to `inner`, recording which layers stored index keys and selected, and the
// kept lists each layer's sparse attention was given.
class RecordingAttention : public AttentionBackend {
 public:
  explicit RecordingAttention(AttentionBackend& inner) : inner_(inner) {}
  void store_kv(int64_t layer, std::span<const float> k, std::span<const float> v) override {
    inner_.store_kv(layer, k, v);
  }
  void attend(int64_t layer, std::span<const float> q, std::span<float> out) override { inner_.attend(layer, q, out); }
  MlaAttentionForm mla_form() const override { return inner_.mla_form(); }
  void store_latent(int64_t layer, std::span<const float> latent) override { inner_.store_latent(layer, latent); }
  void attend_latent(int64_t layer, std::span<const float> q, std::span<float> out) override {
    inner_.attend_latent(layer, q, out);
  }
  void store_index_keys(int64_t layer, std::span<const float> index_keys) override {
    stored.insert(layer);
    inner_.store_index_keys(layer, index_keys);
  }
  void select_tokens(int64_t layer, std::span<const float> q, std::span<const float> weights,
                     std::span<int32_t> kept) override {
    inner_.select_tokens(layer, q, weights, kept);
    selected[layer].assign(kept.begin(), kept.end());
  }
  void attend_latent_sparse(int64_t layer, std::span<const float> q, std::span<const int32_t> kept,
                            std::span<float> out) override {
    attended[layer].assign(kept.begin(), kept.end());
    inner_.attend_latent_sparse(layer, q, kept, out);
  }

  std::set<int64_t> stored;
  std::map<int64_t, std::vector<int32_t>> selected;  // per full layer: [n, index_topk]
  std::map<int64_t, std::vector<int32_t>> attended;  // per layer: the kept lists its attention read

 private:
  AttentionBackend& inner_;
};

constexpr int kPromptLength = 40;  // 5x the tiny preset's top-8

TEST(GlmDsaModel, SharedLayersAttendThePreviousFullLayersSelection) {
  const DenseModel model(tiny_glm_weights());
  const std::vector<int32_t> tokens = prompt_of(kPromptLength, 1);
  std::vector<int64_t> positions(tokens.size()), rows = {kPromptLength - 1};
  std::iota(positions.begin(), positions.end(), 0);
  SequenceKvCache cache(model.config(), kPromptLength);
  SequenceAttention sequence(model.config(), cache, kPromptLength);
  RecordingAttention recording(sequence);
  model.forward(ForwardBatch{tokens, positions, rows}, recording);

  EXPECT_EQ(recording.stored, (std::set<int64_t>{0, 2})) << "only full layers cache index keys";
  ASSERT_EQ(recording.selected.size(), 2u) << "only full layers select";
  ASSERT_TRUE(recording.selected.count(0) && recording.selected.count(2));
  ASSERT_EQ(recording.attended.size(), 4u);
  EXPECT_EQ(recording.attended[0], recording.selected[0]);
  EXPECT_EQ(recording.attended[1], recording.selected[0]) << "layer 1 reuses layer 0's top-k";
  EXPECT_EQ(recording.attended[2], recording.selected[2]);
  EXPECT_EQ(recording.attended[3], recording.selected[2]) << "layer 3 reuses layer 2's top-k, not layer 0's";
  EXPECT_NE(recording.selected[2], recording.selected[0]) << "the two full layers must choose differently, or the "
                                                             "test cannot tell whose selection a shared layer reads";
  EXPECT_TRUE(cache.index_keys[1].empty());
  EXPECT_TRUE(cache.index_keys[3].empty());
  EXPECT_EQ(cache.index_keys[2].size(), size_t{kPromptLength * 16});
}

TEST(GlmDsaModel, PrefillChunksMatchTheWholePrompt) {
  const DenseModel model(tiny_glm_weights());
  const std::vector<int32_t> tokens = prompt_of(kPromptLength, 3);
  const std::vector<float> want = sequence_logits(model, tokens, kPromptLength);
  for (int64_t chunk : {1, 5, 16}) {  // each chunk carries its own full layers' selection to its shared layers
    EXPECT_LT(relative_error(sequence_logits(model, tokens, chunk), want), 1e-5) << "chunk " << chunk;
  }
}

// The GPU runs GLM-5's indexer with rotate-half rope over reordered weight rows
// (indexer_rotate_half_row_order): the same model with those rows and the rotate-half layout must
// give the interleaved model's logits, over a prompt long enough that the top-8 really selects.
TEST(GlmDsaIndexer, ReorderedRowsWithRotateHalfRopeEqualTheInterleavedLayout) {
  const ModelWeights original = tiny_glm_weights(4);
  ModelWeights reordered = original;
  reordered.config.index_rope_layout = RopeLayout::kRotateHalf;
  const std::vector<int64_t> order = indexer_rotate_half_row_order(original.config);
  const std::vector<int64_t> identity = [&] {
    std::vector<int64_t> v(order.size());
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(i);
    return v;
  }();
  ASSERT_NE(order, identity);
  for (LayerWeights& l : reordered.layers) {
    if (l.indexer_wk.empty()) continue;  // a shared layer
    l.indexer_wq_b = reorder_indexer_rows(l.indexer_wq_b, order, original.config.q_lora_rank);
    l.indexer_wk = reorder_indexer_rows(l.indexer_wk, order, original.config.hidden_size);
    l.indexer_k_norm = reorder_indexer_rows(l.indexer_k_norm, order, 1);
    l.indexer_k_norm_bias = reorder_indexer_rows(l.indexer_k_norm_bias, order, 1);
  }
  const DenseModel interleaved(ModelWeights{original});
  const DenseModel rotate_half(std::move(reordered));
  const std::vector<int32_t> tokens = prompt_of(30, 9);
  EXPECT_LT(relative_error(sequence_logits(rotate_half, tokens, 30), sequence_logits(interleaved, tokens, 30)), 1e-5);
  // Without the reordering the rotate-half layout computes other index scores.
  ModelWeights unordered = original;
  unordered.config.index_rope_layout = RopeLayout::kRotateHalf;
  const DenseModel wrong(std::move(unordered));
  EXPECT_GT(relative_error(sequence_logits(wrong, tokens, 30), sequence_logits(interleaved, tokens, 30)), 1e-3);
}

TEST(GlmDsaModel, EngineMatchesGreedyGenerate) {
  testing::expect_engine_matches_greedy_generate(DenseModel(tiny_glm_weights()), "tiny-glm-dsa");
}

TEST(GlmDsaCache, SharedLayersHoldNoIndexKeys) {
  const ModelConfig c = make_model_config({.arch = "glm_moe_dsa", .preset = "tiny-glm-dsa"});
  runner::PagedKvCache paged(c, 8, 4);
  EXPECT_EQ(paged.index_key_size, 16);
  ASSERT_EQ(paged.index_keys.size(), 4u);
  for (size_t layer = 0; layer < 4; ++layer) {
    EXPECT_EQ(paged.index_keys[layer].size(), layer % 2 == 0 ? size_t{8 * 4 * 16} : 0u) << layer;
    EXPECT_EQ(paged.latents[layer].size(), size_t{8 * 4 * (16 + 8)}) << "every layer keeps its latent";
  }
  SequenceKvCache sequence(c, 10);
  ASSERT_EQ(sequence.index_keys.size(), 4u);
  EXPECT_EQ(sequence.index_keys[0].size(), size_t{10 * 16});
  EXPECT_TRUE(sequence.index_keys[1].empty());
  SequenceAttention attention(c, sequence, 2);
  const std::vector<float> keys(2 * 16, 1.0f);
  EXPECT_NO_THROW(attention.store_index_keys(0, keys));
  EXPECT_THROW(attention.store_index_keys(1, keys), Error);
}

TEST(GlmDsaModel, TheGpuServesItAndTensorParallelismRunsOnCpuRanks) {
  const ModelConfig c = make_model_config({.arch = "glm_moe_dsa", .preset = "tiny-glm-dsa"});
  EXPECT_NO_THROW(check_tp_size(c, 1));
  EXPECT_NO_THROW(check_tp_size(c, 2));  // test_tp_families.cpp runs it
  EXPECT_EQ(cuda_tp_unsupported_reason(c, 2), "");  // tests/gpu/test_tp_cuda_runner.cpp runs tiny-gpu-glm-all
  // The interleaved indexer rope and the shared top-k run on the GPU (tests/gpu/test_cuda_model_runner.cpp's
  // tiny-gpu-glm-all against this CPU reference); the real layer shapes are within the kernels' limits.
  EXPECT_EQ(app::cuda_unsupported_reason(c), "");
  EXPECT_EQ(app::cuda_unsupported_reason(make_model_config({.arch = "glm_moe_dsa", .preset = "glm-5-reduced"})), "");

  const auto dir = temp_dir("runner");
  make_model({.arch = "glm_moe_dsa", .preset = "tiny-glm-dsa", .seed = 1, .out_dir = dir});
  testing::expect_cpu_load_and_tp_served(dir, "glm_moe_dsa");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tachyon::model
