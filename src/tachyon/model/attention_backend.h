// AttentionBackend: who owns the KV cache layout. The model computes q, k, v and hands them
// over; the backend stores k and v wherever its cache keeps them and computes attention for
// each token against its own sequence. The model never sees blocks, slots or sequences, so the
// same forward serves one contiguous sequence (SequenceAttention, below) and a ragged batch over
// a paged cache (runner/paged_attention_backend.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/kernels/attention.h"
#include "tachyon/model/model_config.h"

namespace tachyon::model {

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  // k: [num_tokens, num_kv_heads, head_dim], v: [num_tokens, num_kv_heads, value_head_dim] for
  // this step's tokens, in batch order (the widths differ under MLA).
  virtual void store_kv(int64_t layer, std::span<const float> k, std::span<const float> v) = 0;
  // q: [num_tokens, num_heads, head_dim], out: [num_tokens, num_heads, value_head_dim]. Token t
  // attends every key of its sequence up to and including its own position (store_kv of this
  // layer has run).
  virtual void attend(int64_t layer, std::span<const float> q, std::span<float> out) = 0;
};

// The attention kernel's shape for `num_queries` new tokens after `first_position` cached ones.
kernels::cpu::AttentionShape attention_shape(const ModelConfig& config, int64_t num_queries, int64_t first_position);

// Contiguous K/V of one sequence: per layer keys [capacity, num_kv_heads, head_dim] and values
// [capacity, num_kv_heads, value_head_dim] f32. Serves the reference forward, greedy_generate
// and tests; the engine uses the paged cache.
struct SequenceKvCache {
  SequenceKvCache(const ModelConfig& config, int64_t capacity);
  int64_t capacity = 0;
  int64_t length = 0;  // tokens whose K/V are written
  std::vector<std::vector<float>> keys;
  std::vector<std::vector<float>> values;
};

// One sequence whose `num_new` new tokens follow the cache's current contents.
class SequenceAttention : public AttentionBackend {
 public:
  SequenceAttention(const ModelConfig& config, SequenceKvCache& cache, int64_t num_new);
  void store_kv(int64_t layer, std::span<const float> k, std::span<const float> v) override;
  void attend(int64_t layer, std::span<const float> q, std::span<float> out) override;

 private:
  const ModelConfig& config_;
  SequenceKvCache& cache_;
  int64_t num_new_;
};

}  // namespace tachyon::model
