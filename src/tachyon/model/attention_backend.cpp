#include "tachyon/model/attention_backend.h"

#include <algorithm>
#include <cmath>

#include "tachyon/base/check.h"
#include "tachyon/kernels/attention.h"
#include "tachyon/model/rope.h"

namespace tachyon::model {

SequenceKvCache::SequenceKvCache(const ModelConfig& config, int64_t capacity_tokens) : capacity(capacity_tokens) {
  keys.assign(static_cast<size_t>(config.num_hidden_layers),
              std::vector<float>(static_cast<size_t>(capacity_tokens * config.kv_size())));
  values.assign(static_cast<size_t>(config.num_hidden_layers),
                std::vector<float>(static_cast<size_t>(capacity_tokens * config.v_size())));
}

SequenceAttention::SequenceAttention(const ModelConfig& config, SequenceKvCache& cache, int64_t num_new)
    : config_(config), cache_(cache), num_new_(num_new) {
  TACHYON_CHECK(cache.length + num_new <= cache.capacity)
      << "sequence of " << cache.length + num_new << " tokens exceeds the KV cache capacity " << cache.capacity;
}

void SequenceAttention::store_kv(int64_t layer, std::span<const float> k, std::span<const float> v) {
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

void SequenceAttention::attend(int64_t layer, std::span<const float> q, std::span<float> out) {
  const kernels::cpu::AttentionShape shape = attention_shape(config_, num_new_, cache_.length);
  kernels::cpu::attention(out.data(), q.data(), cache_.keys[static_cast<size_t>(layer)].data(),
                          cache_.values[static_cast<size_t>(layer)].data(), shape);
}

}  // namespace tachyon::model
