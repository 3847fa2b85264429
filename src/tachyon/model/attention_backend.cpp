#include "tachyon/model/attention_backend.h"

#include <algorithm>
#include <cmath>

#include "tachyon/base/check.h"
#include "tachyon/kernels/attention.h"
#include "tachyon/kernels/sparse_mla_attention.h"
#include "tachyon/model/rope.h"

namespace tachyon::model {

int64_t kv_values_per_token(const ModelConfig& config, MlaAttentionForm form) {
  if (config.is_mla() && form == MlaAttentionForm::kAbsorbed) return config.kv_lora_rank + config.qk_rope_head_dim;
  return config.kv_size() + config.v_size();
}

int64_t index_key_values_per_token(const ModelConfig& config) {
  return config.has_sparse_attention() ? config.index_head_dim : 0;
}

std::vector<std::vector<float>> index_key_storage(const ModelConfig& config, int64_t slots) {
  std::vector<std::vector<float>> storage;
  if (!config.has_sparse_attention()) return storage;
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    const int64_t width = config.has_indexer(layer) ? index_key_values_per_token(config) : 0;
    storage.emplace_back(static_cast<size_t>(slots * width));
  }
  return storage;
}

std::vector<float>& layer_index_keys(const ModelConfig& config, std::vector<std::vector<float>>& index_keys,
                                     int64_t layer) {
  TACHYON_CHECK(!index_keys.empty()) << config.architecture
                                     << " has no sparse-attention indexer, so the cache holds no index keys";
  TACHYON_CHECK(layer >= 0 && layer < static_cast<int64_t>(index_keys.size()) &&
                !index_keys[static_cast<size_t>(layer)].empty())
      << "layer " << layer << " of " << config.architecture << " has no indexer of its own (a \"shared\" layer of "
      << "indexer_types reuses the previous full layer's top-k), so the cache holds no index keys for it";
  return index_keys[static_cast<size_t>(layer)];
}

SequenceKvCache::SequenceKvCache(const ModelConfig& config, int64_t capacity_tokens, MlaAttentionForm form)
    : capacity(capacity_tokens), mla_form(form) {
  const size_t layers = static_cast<size_t>(config.num_hidden_layers);
  TACHYON_CHECK(!config.has_sparse_attention() || form == MlaAttentionForm::kAbsorbed)
      << config.architecture << ": sparse attention (DSA) runs in the absorbed MLA form only";
  if (config.is_mla() && form == MlaAttentionForm::kAbsorbed) {
    latents.assign(layers, std::vector<float>(static_cast<size_t>(capacity_tokens * kv_values_per_token(config, form))));
    index_keys = index_key_storage(config, capacity_tokens);
    return;
  }
  keys.assign(layers, std::vector<float>(static_cast<size_t>(capacity_tokens * config.kv_size())));
  values.assign(layers, std::vector<float>(static_cast<size_t>(capacity_tokens * config.v_size())));
}

SequenceAttention::SequenceAttention(const ModelConfig& config, SequenceKvCache& cache, int64_t num_new)
    : config_(config), cache_(cache), num_new_(num_new) {
  TACHYON_CHECK(cache.length + num_new <= cache.capacity)
      << "sequence of " << cache.length + num_new << " tokens exceeds the KV cache capacity " << cache.capacity;
}

void SequenceAttention::store_kv(int64_t layer, std::span<const float> k, std::span<const float> v) {
  TACHYON_CHECK(!cache_.keys.empty()) << "store_kv: this sequence cache holds MLA latents (the absorbed form); "
                                         "build it with MlaAttentionForm::kDecompressed to store per-head K/V";
  const auto k_offset = static_cast<long>(cache_.length * config_.kv_size());
  const auto v_offset = static_cast<long>(cache_.length * config_.v_size());
  std::copy(k.begin(), k.end(), cache_.keys[static_cast<size_t>(layer)].begin() + k_offset);
  std::copy(v.begin(), v.end(), cache_.values[static_cast<size_t>(layer)].begin() + v_offset);
}

kernels::cpu::AttentionShape attention_shape(const ModelConfig& config, int64_t num_queries, int64_t first_position) {
  kernels::cpu::AttentionShape shape;
  shape.num_queries = num_queries;
  shape.first_position = first_position;
  shape.num_heads = config.num_attention_heads;
  shape.num_kv_heads = config.num_key_value_heads;
  shape.head_dim = config.head_dim;
  shape.sliding_window = config.sliding_window.value_or(0);
  shape.v_head_dim = config.value_head_dim();
  if (config.is_mla()) {
    // DeepseekV3Attention: qk_head_dim^-0.5 times YaRN's mscale^2, a Python double rounded to f32
    // once when it multiplies the scores.
    const double scale = std::pow(static_cast<double>(config.head_dim), -0.5) * rope_softmax_mscale(config);
    shape.scale = static_cast<float>(scale);
  } else {
    shape.scale = 1.0f / std::sqrt(static_cast<float>(config.head_dim));
  }
  return shape;
}

kernels::cpu::MlaAttentionShape mla_attention_shape(const ModelConfig& config, int64_t num_queries,
                                                    int64_t first_position) {
  TACHYON_CHECK(config.is_mla()) << "mla_attention_shape: " << config.model_type << " has no latent attention";
  kernels::cpu::MlaAttentionShape shape;
  shape.num_queries = num_queries;
  shape.first_position = first_position;
  shape.num_heads = config.num_attention_heads;
  shape.kv_lora_rank = config.kv_lora_rank;
  shape.rope_dim = config.qk_rope_head_dim;
  shape.scale = attention_shape(config, num_queries, first_position).scale;
  return shape;
}

kernels::cpu::DsaIndexerShape dsa_indexer_shape(const ModelConfig& config, int64_t num_queries,
                                                int64_t first_position) {
  TACHYON_CHECK(config.has_sparse_attention()) << "dsa_indexer_shape: " << config.model_type
                                               << " has no sparse-attention indexer";
  kernels::cpu::DsaIndexerShape shape;
  shape.num_queries = num_queries;
  shape.first_position = first_position;
  shape.num_heads = config.index_n_heads;
  shape.head_dim = config.index_head_dim;
  shape.topk = config.index_topk;
  // DeepseekV32Indexer's softmax_scale = head_dim ** -0.5, a Python double rounded to f32 once.
  shape.scale = static_cast<float>(std::pow(static_cast<double>(config.index_head_dim), -0.5));
  return shape;
}

void SequenceAttention::store_latent(int64_t layer, std::span<const float> latent) {
  TACHYON_CHECK(!cache_.latents.empty()) << "store_latent: this sequence cache holds per-head K/V; build it with "
                                            "MlaAttentionForm::kAbsorbed for an MLA model to store latents";
  const int64_t width = config_.kv_lora_rank + config_.qk_rope_head_dim;
  TACHYON_CHECK(static_cast<int64_t>(latent.size()) == num_new_ * width)
      << "store_latent: " << latent.size() << " values for " << num_new_ << " tokens of width " << width;
  std::copy(latent.begin(), latent.end(),
            cache_.latents[static_cast<size_t>(layer)].begin() + static_cast<long>(cache_.length * width));
}

void SequenceAttention::attend_latent(int64_t layer, std::span<const float> q, std::span<float> out) {
  const kernels::cpu::MlaAttentionShape shape = mla_attention_shape(config_, num_new_, cache_.length);
  kernels::cpu::mla_attention(out.data(), q.data(), cache_.latents[static_cast<size_t>(layer)].data(), shape);
}

void SequenceAttention::attend(int64_t layer, std::span<const float> q, std::span<float> out) {
  TACHYON_CHECK(!cache_.keys.empty()) << "attend: this sequence cache holds MLA latents; use attend_latent";
  const kernels::cpu::AttentionShape shape = attention_shape(config_, num_new_, cache_.length);
  kernels::cpu::attention(out.data(), q.data(), cache_.keys[static_cast<size_t>(layer)].data(),
                          cache_.values[static_cast<size_t>(layer)].data(), shape);
}

void SequenceAttention::store_index_keys(int64_t layer, std::span<const float> index_keys) {
  std::vector<float>& layer_keys = layer_index_keys(config_, cache_.index_keys, layer);
  const int64_t width = config_.index_head_dim;
  TACHYON_CHECK(static_cast<int64_t>(index_keys.size()) == num_new_ * width)
      << "store_index_keys: " << index_keys.size() << " values for " << num_new_ << " tokens of width " << width;
  std::copy(index_keys.begin(), index_keys.end(), layer_keys.begin() + static_cast<long>(cache_.length * width));
}

void SequenceAttention::select_tokens(int64_t layer, std::span<const float> q, std::span<const float> weights,
                                      std::span<int32_t> kept) {
  const kernels::cpu::DsaIndexerShape shape = dsa_indexer_shape(config_, num_new_, cache_.length);
  std::vector<float> scores(static_cast<size_t>(num_new_ * (cache_.length + num_new_)));
  kernels::cpu::dsa_index_scores(scores.data(), q.data(), weights.data(),
                                 layer_index_keys(config_, cache_.index_keys, layer).data(), shape);
  kernels::cpu::dsa_select_topk(kept.data(), scores.data(), shape);
}

void SequenceAttention::attend_latent_sparse(int64_t layer, std::span<const float> q, std::span<const int32_t> kept,
                                             std::span<float> out) {
  const kernels::cpu::MlaAttentionShape shape = mla_attention_shape(config_, num_new_, cache_.length);
  kernels::cpu::sparse_mla_attention(out.data(), q.data(), cache_.latents[static_cast<size_t>(layer)].data(),
                                     kept.data(), config_.index_topk, shape);
}

}  // namespace tachyon::model
