// DeepSeek-V3's MTP module: the input mixing and the shared head are written here; the decoder
// layer between them is the main forward's (detail::decoder_layer), so MTP cannot drift from it.
#include "tachyon/model/mtp.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "tachyon/base/check.h"
#include "tachyon/kernels/linear.h"
#include "tachyon/kernels/rms_norm.h"
#include "tachyon/model/dense_forward.h"
#include "tachyon/model/fp8_projections.h"
#include "tachyon/model/layer_plan.h"
#include "tachyon/model/rope.h"
#include "tachyon/model/safetensors.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::model {

namespace cpu = kernels::cpu;

ModelConfig mtp_layer_config(const ModelConfig& main_config) {
  TACHYON_CHECK(main_config.is_moe()) << main_config.architecture
                                      << ": multi-token prediction needs a mixture-of-experts model (DeepSeek-V3)";
  ModelConfig c = main_config;
  c.num_hidden_layers = 1;
  c.first_k_dense_replace = 0;  // layer 0 of this config is the MoE layer
  c.decoder_sparse_step = 1;
  c.mlp_only_layers.clear();
  c.num_nextn_predict_layers = 0;
  c.indexer_types.clear();  // GLM-5: the module's layer runs its own indexer (it has the weights)
  return c;
}

MtpModule::MtpModule(const ModelConfig& main_config, MtpWeights weights)
    : layer_config_(mtp_layer_config(main_config)),
      weights_(std::move(weights)),
      inv_freq_(rope_inv_freq(layer_config_)),
      layer_kinds_(layer_plan(layer_config_).front()) {}

MtpOutput MtpModule::forward(std::span<const float> hidden, std::span<const int32_t> next_tokens,
                             std::span<const int64_t> positions, AttentionBackend& attention,
                             const ForwardHook& hook) const {
  const ModelConfig& c = layer_config_;
  const int64_t n = static_cast<int64_t>(next_tokens.size()), h = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  TACHYON_CHECK(n > 0) << "MTP forward needs at least one row";
  TACHYON_CHECK(static_cast<int64_t>(hidden.size()) == n * h)
      << "MTP forward: " << hidden.size() << " hidden values for " << n << " rows of " << h;
  TACHYON_CHECK(static_cast<int64_t>(positions.size()) == n)
      << "MTP forward: " << positions.size() << " positions for " << n << " rows";
  const MtpWeights& w = weights_;
  // The hook sees the checkpoint's layer index, not the one-layer config's 0.
  ForwardHook layer_hook;
  if (hook) {
    layer_hook = [&](std::string_view name, int64_t, std::span<const float> values) {
      hook(name, w.checkpoint_layer, values);
    };
  }

  // [enorm(embed(token)) | hnorm(h)] per row: [n, 2 * hidden].
  std::vector<float> embedded(static_cast<size_t>(n * h));  // [n, hidden]
  for (int64_t t = 0; t < n; ++t) {
    const int64_t id = next_tokens[static_cast<size_t>(t)];
    TACHYON_CHECK(id >= 0 && id < c.vocab_size) << "token id " << id << " is outside the vocabulary [0, "
                                                << c.vocab_size << ")";
    std::copy_n(w.embed_tokens.data() + id * h, h, embedded.data() + t * h);
  }
  std::vector<float> normed_hidden(static_cast<size_t>(n * h));  // [n, hidden]
  cpu::rms_norm(embedded.data(), embedded.data(), w.enorm.data(), n, h, eps);
  cpu::rms_norm(normed_hidden.data(), hidden.data(), w.hnorm.data(), n, h, eps);
  std::vector<float> concat(static_cast<size_t>(n * 2 * h));  // [n, 2 * hidden]
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(embedded.data() + t * h, h, concat.data() + t * 2 * h);
    std::copy_n(normed_hidden.data() + t * h, h, concat.data() + t * 2 * h + h);
  }
  std::vector<float> x(static_cast<size_t>(n * h));  // [n, hidden]
  cpu::linear(x.data(), concat.data(), w.eh_proj.data(), nullptr, n, 2 * h, h);
  if (layer_hook) layer_hook("mtp_input", 0, x);

  const detail::TensorParallelSeams unsharded{.group = nullptr, .vocab_begin = 0, .vocab_rows = c.vocab_size};
  detail::LayerCarry carry;  // the module's one layer is a full DSA layer when the model has DSA
  detail::decoder_layer(c, layer_kinds_, w.layer, inv_freq_, unsharded, 0, x, positions, attention, carry, layer_hook);

  MtpOutput out;
  out.hidden = x;
  std::vector<float> normed(x.size());  // [n, hidden]
  cpu::rms_norm(normed.data(), x.data(), w.head_norm.data(), n, h, eps);
  out.logits.resize(static_cast<size_t>(n * c.vocab_size));  // [n, vocab]
  cpu::linear(out.logits.data(), normed.data(), w.head.data(), nullptr, n, h, c.vocab_size);
  return out;
}

MtpOutput MtpModule::forward(std::span<const float> hidden, std::span<const int32_t> next_tokens,
                             SequenceKvCache& cache, const ForwardHook& hook) const {
  const int64_t n = static_cast<int64_t>(next_tokens.size());
  std::vector<int64_t> positions(static_cast<size_t>(n));
  std::iota(positions.begin(), positions.end(), cache.length + 1);  // row t embeds token t + 1
  SequenceAttention attention(layer_config_, cache, n);
  MtpOutput out = forward(hidden, next_tokens, positions, attention, hook);
  cache.length += n;
  return out;
}

void reserve_rows(SequenceKvCache& cache, int64_t capacity) {
  if (capacity <= cache.capacity) return;
  TACHYON_CHECK(cache.capacity > 0) << "internal: reserve_rows on a cache of no rows";
  for (auto* arrays : {&cache.keys, &cache.values, &cache.latents, &cache.index_keys}) {
    for (std::vector<float>& rows : *arrays) {
      rows.resize(rows.size() / static_cast<size_t>(cache.capacity) * static_cast<size_t>(capacity));
    }
  }
  cache.capacity = capacity;
}

namespace {

// Every per-layer array of `cache`, in copy_rows' order.
template <typename Cache>
auto row_arrays(Cache& cache) {
  return std::array{&cache.keys, &cache.values, &cache.latents, &cache.index_keys};
}

}  // namespace

std::vector<float> copy_rows(const SequenceKvCache& cache, int64_t length) {
  TACHYON_CHECK(length >= 0 && length <= cache.capacity)
      << "internal: " << length << " rows of a cache of " << cache.capacity;
  std::vector<float> out;
  for (const std::vector<std::vector<float>>* arrays : row_arrays(cache)) {
    for (const std::vector<float>& rows : *arrays) {
      const size_t width = rows.size() / static_cast<size_t>(cache.capacity);
      out.insert(out.end(), rows.begin(), rows.begin() + static_cast<int64_t>(width) * length);
    }
  }
  return out;
}

bool set_rows(SequenceKvCache& cache, std::span<const float> values, int64_t length) {
  if (length < 0 || cache.capacity <= 0) return false;
  size_t row_values = 0;
  for (const std::vector<std::vector<float>>* arrays : row_arrays(cache)) {
    for (const std::vector<float>& rows : *arrays) row_values += rows.size() / static_cast<size_t>(cache.capacity);
  }
  if (values.size() != row_values * static_cast<size_t>(length)) return false;
  reserve_rows(cache, length);
  size_t at = 0;
  for (std::vector<std::vector<float>>* arrays : row_arrays(cache)) {
    for (std::vector<float>& rows : *arrays) {
      const size_t count = rows.size() / static_cast<size_t>(cache.capacity) * static_cast<size_t>(length);
      std::copy_n(values.begin() + static_cast<int64_t>(at), count, rows.begin());
      at += count;
    }
  }
  cache.length = length;
  return true;
}

std::vector<MtpModule> load_mtp_modules(const std::filesystem::path& model_dir) {
  const ModelConfig config = ModelConfig::from_dir(model_dir);
  TACHYON_CHECK(config.num_nextn_predict_layers > 0)
      << (model_dir / "config.json").string() << " declares no MTP modules (num_nextn_predict_layers is 0)";
  SafetensorsCheckpoint checkpoint(model_dir);
  std::vector<MtpModule> modules;
  for (MtpWeights& weights : load_mtp_weights(config, checkpoint)) modules.emplace_back(config, std::move(weights));
  return modules;
}

Bf16MtpModule to_bf16_module(const ModelConfig& main_config, MtpWeights&& weights) {
  auto bf16 = [](const std::vector<float>& values) {
    std::vector<uint16_t> out(values.size());
    for (size_t i = 0; i < values.size(); ++i) out[i] = f32_to_bf16(values[i]);
    return out;
  };
  Bf16MtpModule module;
  module.enorm = bf16(weights.enorm);
  module.hnorm = bf16(weights.hnorm);
  module.eh_proj = bf16(weights.eh_proj);
  ModelWeights layer_model;
  layer_model.config = mtp_layer_config(main_config);
  layer_model.embed_tokens = std::move(weights.embed_tokens);
  layer_model.layers.push_back(std::move(weights.layer));
  layer_model.final_norm = std::move(weights.head_norm);
  layer_model.lm_head = std::move(weights.head);
  module.layer_model = to_bf16_weights(std::move(layer_model));
  return module;
}

}  // namespace tachyon::model
