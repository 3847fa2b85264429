// DeepSeek-V3's multi-token-prediction module (model/mtp.h) on the CPU reference: the checkpoint
// names and shapes make-model writes and the loader keeps; the forward against a reference built
// here step by step from the loaded weights (norms, concat and eh_proj in double, then the decoder
// layer as a separately constructed one-layer DenseModel whose embedding table holds the mixed
// inputs, then the shared head); chunked against all at once; the main model untouched by the
// module's presence; and the refusal of a module with a missing tensor.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tachyon/base/check.h"
#include "tachyon/base/file_util.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/model/mtp.h"
#include "tachyon/model/safetensors.h"

namespace tachyon::model {
namespace {

std::filesystem::path temp_dir(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("tachyon-mtp-" + std::to_string(::getpid()) + "-" + name);
}

// A make-model directory that removes itself.
struct ModelDir {
  std::filesystem::path path;
  ModelDir(const std::string& preset, uint64_t seed, const std::string& name) : path(temp_dir(name)) {
    make_model({.arch = "deepseek_v3", .preset = preset, .seed = seed, .out_dir = path});
  }
  ~ModelDir() { std::filesystem::remove_all(path); }
};

std::vector<int32_t> prompt_tokens(int64_t count, int64_t vocab) {
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < count; ++i) tokens.push_back(static_cast<int32_t>((i * 53 + 17) % vocab));
  return tokens;
}

// The main model's pre-final-norm hidden states [n, hidden] of `tokens` (the "final_hidden" hook).
std::vector<float> main_final_hidden(const DenseModel& model, const std::vector<int32_t>& tokens) {
  SequenceKvCache cache(model.config(), static_cast<int64_t>(tokens.size()));
  std::vector<float> hidden;
  model.forward(tokens, cache, /*all_logits=*/true, [&](std::string_view name, int64_t, std::span<const float> v) {
    if (name == "final_hidden") hidden.assign(v.begin(), v.end());
  });
  return hidden;
}

// max |a - b| over max |b|.
double relative_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// rows [n, dim] -> RMSNorm(rows) * weight, in double.
std::vector<double> rms_norm_reference(const float* rows, const std::vector<float>& weight, int64_t n, int64_t dim,
                                       double eps) {
  std::vector<double> out(static_cast<size_t>(n * dim));
  for (int64_t t = 0; t < n; ++t) {
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += static_cast<double>(rows[t * dim + i]) * rows[t * dim + i];
    const double inv = 1.0 / std::sqrt(sum / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) out[t * dim + i] = rows[t * dim + i] * inv * weight[i];
  }
  return out;
}

// The MTP module's logits and h' computed step by step: the input mixing in double, then the
// decoder layer and the shared head as a one-layer DenseModel whose embedding rows 0..n-1 are the
// mixed inputs x (so "embedding" token i yields x_i exactly), final norm shared_head.norm, LM head
// shared_head.head, run at `positions`.
// `latent`, when given, receives the layer's cached rows [n, kv_lora_rank + qk_rope] (roped: they
// pin the positions, which the attention itself cannot see, RoPE being relative).
MtpOutput reference_mtp(const ModelConfig& main_config, const MtpWeights& w, const std::vector<float>& hidden,
                        const std::vector<int32_t>& next_tokens, const std::vector<int64_t>& positions,
                        std::vector<float>* latent = nullptr) {
  const int64_t n = static_cast<int64_t>(next_tokens.size()), h = main_config.hidden_size;
  std::vector<float> embedded;
  for (int32_t id : next_tokens) {
    embedded.insert(embedded.end(), w.embed_tokens.begin() + id * h, w.embed_tokens.begin() + (id + 1) * h);
  }
  const std::vector<double> e = rms_norm_reference(embedded.data(), w.enorm, n, h, main_config.rms_norm_eps);
  const std::vector<double> g = rms_norm_reference(hidden.data(), w.hnorm, n, h, main_config.rms_norm_eps);

  ModelWeights one_layer;
  one_layer.config = main_config;
  one_layer.config.num_hidden_layers = 1;
  one_layer.config.first_k_dense_replace = 0;
  one_layer.config.num_nextn_predict_layers = 0;
  one_layer.embed_tokens.assign(static_cast<size_t>(main_config.vocab_size * h), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t o = 0; o < h; ++o) {  // x = eh_proj @ [e | g], eh_proj [hidden, 2 * hidden]
      double sum = 0.0;
      for (int64_t i = 0; i < h; ++i) sum += w.eh_proj[o * 2 * h + i] * e[t * h + i];
      for (int64_t i = 0; i < h; ++i) sum += w.eh_proj[o * 2 * h + h + i] * g[t * h + i];
      one_layer.embed_tokens[t * h + o] = static_cast<float>(sum);
    }
  }
  one_layer.layers = {w.layer};
  one_layer.final_norm = w.head_norm;
  one_layer.lm_head = w.head;
  const DenseModel layer_model(std::move(one_layer));

  std::vector<int32_t> rows_as_tokens(static_cast<size_t>(n));
  std::vector<int64_t> logits_rows(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) rows_as_tokens[t] = static_cast<int32_t>(t), logits_rows[t] = t;
  SequenceKvCache cache(layer_model.config(), n);
  SequenceAttention attention(layer_model.config(), cache, n);
  MtpOutput out;
  out.logits = layer_model.forward(ForwardBatch{rows_as_tokens, positions, logits_rows}, attention,
                                   [&](std::string_view name, int64_t, std::span<const float> v) {
                                     if (name == "final_hidden") out.hidden.assign(v.begin(), v.end());
                                     if (name == "latent" && latent) latent->assign(v.begin(), v.end());
                                   });
  return out;
}

TEST(MtpWeights, LoadingKeepsTheModuleTensorsWithTheCheckpointNames) {
  ModelDir dir("tiny-deepseek-mtp", 3, "names");
  const ModelConfig c = ModelConfig::from_dir(dir.path);
  ASSERT_EQ(c.num_nextn_predict_layers, 1);
  ASSERT_EQ(c.num_hidden_layers, 3);
  const int64_t h = c.hidden_size, vocab = c.vocab_size;
  const std::map<std::string, std::vector<int64_t>> mtp_shapes = {
      {"model.layers.3.enorm.weight", {h}},
      {"model.layers.3.hnorm.weight", {h}},
      {"model.layers.3.eh_proj.weight", {h, 2 * h}},
      {"model.layers.3.embed_tokens.weight", {vocab, h}},
      {"model.layers.3.input_layernorm.weight", {h}},
      {"model.layers.3.self_attn.kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope_head_dim, h}},
      {"model.layers.3.post_attention_layernorm.weight", {h}},
      {"model.layers.3.mlp.gate.weight", {c.num_experts, h}},
      {"model.layers.3.mlp.experts.15.down_proj.weight", {h, c.moe_intermediate_size}},
      {"model.layers.3.shared_head.norm.weight", {h}},
      {"model.layers.3.shared_head.head.weight", {vocab, h}},
  };
  std::map<std::string, std::vector<int64_t>> expected;
  for (auto& [name, shape] : expected_tensors(c)) expected[name] = shape;
  SafetensorsCheckpoint checkpoint(dir.path);
  for (const auto& [name, shape] : mtp_shapes) {
    EXPECT_EQ(expected[name], shape) << name;
    ASSERT_TRUE(checkpoint.contains(name)) << name;
    EXPECT_EQ(checkpoint.at(name).shape, shape) << name;
  }
  EXPECT_FALSE(expected.count("model.layers.3.mlp.gate_proj.weight")) << "the MTP layer is MoE, not dense";
  EXPECT_FALSE(expected.count("model.layers.4.enorm.weight"));

  const ModelWeights main = load_weights(c, checkpoint);
  const std::vector<MtpWeights> modules = load_mtp_weights(c, checkpoint);
  ASSERT_EQ(modules.size(), 1u);
  const MtpWeights& m = modules[0];
  EXPECT_EQ(m.checkpoint_layer, 3);
  EXPECT_EQ(m.enorm.size(), static_cast<size_t>(h));
  EXPECT_EQ(m.eh_proj.size(), static_cast<size_t>(2 * h * h));
  EXPECT_EQ(m.layer.experts_gate_up.size(), static_cast<size_t>(c.num_experts * 2 * c.moe_intermediate_size * h));
  EXPECT_TRUE(m.layer.gate_up.empty());
  EXPECT_FALSE(m.embed_from_main);
  EXPECT_FALSE(m.head_from_main);
  // make-model writes the copies as the real checkpoint has them: equal to the main tensors.
  EXPECT_EQ(m.embed_tokens, main.embed_tokens);
  EXPECT_EQ(m.head, main.output_embedding());
  EXPECT_NE(m.layer.router, main.layers[2].router) << "the MTP layer has weights of its own";
}

// make-model draws each tensor from (seed, name), and tiny-deepseek-mtp's main tensors have
// tiny-deepseek's names and shapes: the same seed gives the same main model, bit for bit.
TEST(MtpModel, MainLogitsAreUnchangedByTheModule) {
  ModelDir with("tiny-deepseek-mtp", 5, "with");
  ModelDir without("tiny-deepseek", 5, "without");
  const DenseModel a = DenseModel::load(with.path), b = DenseModel::load(without.path);
  const std::vector<int32_t> tokens = prompt_tokens(9, a.config().vocab_size);
  SequenceKvCache cache_a(a.config(), 9), cache_b(b.config(), 9);
  EXPECT_EQ(a.forward(tokens, cache_a, true), b.forward(tokens, cache_b, true));
}

TEST(MtpForward, MatchesAStepByStepReference) {
  ModelDir dir("tiny-deepseek-mtp", 3, "reference");
  const DenseModel model = DenseModel::load(dir.path);
  const std::vector<MtpModule> modules = load_mtp_modules(dir.path);
  ASSERT_EQ(modules.size(), 1u);
  const MtpModule& mtp = modules[0];
  const int64_t n = 10, h = model.config().hidden_size;
  std::vector<int32_t> tokens = prompt_tokens(n + 1, model.config().vocab_size);
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + n);
  const std::vector<int32_t> next(tokens.begin() + 1, tokens.end());  // token t + 1 for each row t
  const std::vector<float> hidden = main_final_hidden(model, prompt);
  ASSERT_EQ(hidden.size(), static_cast<size_t>(n * h));

  // One position (the last), on an empty cache.
  {
    const std::vector<float> last(hidden.end() - h, hidden.end());
    SequenceKvCache cache = mtp.make_cache(1);
    const MtpOutput got = mtp.forward(last, std::span<const int32_t>(&next.back(), 1), cache);
    const MtpOutput want = reference_mtp(model.config(), mtp.weights(), last, {next.back()}, {n});
    EXPECT_LT(relative_error(got.logits, want.logits), 1e-5);
    EXPECT_LT(relative_error(got.hidden, want.hidden), 1e-5);
  }
  // Every position at once: row t attends rows 0..t of the module's own cache, roped at t + 1.
  {
    SequenceKvCache cache = mtp.make_cache(n);
    std::vector<float> got_latent, want_latent;
    const MtpOutput got = mtp.forward(hidden, next, cache, [&](std::string_view name, int64_t layer,
                                                               std::span<const float> v) {
      if (name == "latent") got_latent.assign(v.begin(), v.end());
      if (name == "latent") {
        EXPECT_EQ(layer, 3) << "hooks name the checkpoint layer";
      }
    });
    std::vector<int64_t> positions;
    for (int64_t t = 0; t < n; ++t) positions.push_back(t + 1);
    const MtpOutput want = reference_mtp(model.config(), mtp.weights(), hidden, next, positions, &want_latent);
    EXPECT_LT(relative_error(got.logits, want.logits), 1e-5);
    EXPECT_LT(relative_error(got.hidden, want.hidden), 1e-5);
    EXPECT_LT(relative_error(got_latent, want_latent), 1e-5);
    EXPECT_EQ(cache.length, n);
  }
}

TEST(MtpForward, ChunkedEqualsAllAtOnce) {
  ModelDir dir("tiny-deepseek-mtp", 7, "chunks");
  const DenseModel model = DenseModel::load(dir.path);
  const MtpModule mtp = std::move(load_mtp_modules(dir.path)[0]);
  const int64_t n = 11, h = model.config().hidden_size;
  std::vector<int32_t> tokens = prompt_tokens(n + 1, model.config().vocab_size);
  const std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + n);
  const std::vector<int32_t> next(tokens.begin() + 1, tokens.end());
  const std::vector<float> hidden = main_final_hidden(model, prompt);

  SequenceKvCache whole_cache = mtp.make_cache(n);
  const MtpOutput whole = mtp.forward(hidden, next, whole_cache);

  SequenceKvCache cache = mtp.make_cache(n);
  MtpOutput chunked;
  int64_t begin = 0;
  for (int64_t size : {4, 1, 6}) {
    const MtpOutput part = mtp.forward(std::span<const float>(hidden).subspan(begin * h, size * h),
                                       std::span<const int32_t>(next).subspan(begin, size), cache);
    chunked.logits.insert(chunked.logits.end(), part.logits.begin(), part.logits.end());
    chunked.hidden.insert(chunked.hidden.end(), part.hidden.begin(), part.hidden.end());
    begin += size;
  }
  ASSERT_EQ(begin, n);
  EXPECT_LT(relative_error(chunked.logits, whole.logits), 1e-5);
  EXPECT_LT(relative_error(chunked.hidden, whole.hidden), 1e-5);
}

// Copies `dir`'s config and every tensor except those `drop` names into `out`.
void copy_checkpoint_without(const std::filesystem::path& dir, const std::filesystem::path& out,
                             const std::vector<std::string>& drop) {
  std::filesystem::create_directories(out);
  std::filesystem::copy_file(dir / "config.json", out / "config.json");
  SafetensorsCheckpoint checkpoint(dir);
  std::map<std::string, TensorSource> tensors;
  for (const auto& [name, view] : checkpoint.tensors()) {
    if (std::find(drop.begin(), drop.end(), name) != drop.end()) continue;
    const TensorView* source = &view;
    tensors[name] = TensorSource{view.dtype, view.shape, [source](std::byte* bytes) {
                                   std::memcpy(bytes, source->data,
                                               static_cast<size_t>(source->numel()) * dtype_size(source->dtype));
                                 }};
  }
  write_safetensors(out / "model.safetensors", tensors);
}

// A module's embed_tokens / shared_head.head copy is optional: absent, the main one is used, which
// (the copies being equal) changes nothing.
TEST(MtpWeights, AbsentEmbeddingAndHeadCopiesFallBackToTheMainOnes) {
  ModelDir dir("tiny-deepseek-mtp", 3, "full");
  const std::filesystem::path lean = temp_dir("lean");
  copy_checkpoint_without(dir.path, lean,
                          {"model.layers.3.embed_tokens.weight", "model.layers.3.shared_head.head.weight"});
  const MtpModule full = std::move(load_mtp_modules(dir.path)[0]);
  const MtpModule shared = std::move(load_mtp_modules(lean)[0]);
  EXPECT_TRUE(shared.weights().embed_from_main);
  EXPECT_TRUE(shared.weights().head_from_main);
  EXPECT_EQ(shared.weights().embed_tokens, full.weights().embed_tokens);
  EXPECT_EQ(shared.weights().head, full.weights().head);
  EXPECT_NO_THROW(DenseModel::load(lean));
  std::filesystem::remove_all(lean);
}

// Declaring an MTP module and lacking one of its tensors fails naming it (the main model, which
// never runs the module, still loads).
TEST(MtpWeights, AMissingModuleTensorFailsNamingIt) {
  ModelDir dir("tiny-deepseek-mtp", 3, "complete");
  const std::filesystem::path broken = temp_dir("broken");
  copy_checkpoint_without(dir.path, broken, {"model.layers.3.eh_proj.weight"});
  EXPECT_NO_THROW(DenseModel::load(broken));
  try {
    load_mtp_modules(broken);
    ADD_FAILURE() << "a module without eh_proj was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing tensor 'model.layers.3.eh_proj.weight'"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(broken);
}

}  // namespace
}  // namespace tachyon::model
