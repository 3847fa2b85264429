// AttentionBackend: who owns the KV cache layout. The model computes q, k, v and hands them
// over; the backend stores k and v wherever its cache keeps them and computes attention for
// each token against its own sequence. The model never sees blocks, slots or sequences, so the
// same forward serves one contiguous sequence (SequenceAttention, below) and a ragged batch over
// a paged cache (runner/paged_attention_backend.h).
// MLA models are cached in one of two forms (MlaAttentionForm): the decompressed per-head K/V that
// store_kv/attend take, or the shared latent row that store_latent/attend_latent take (the
// absorbed form, kernels/mla_attention.h). The cache picks the form; the model asks mla_form().
// DeepSeek sparse attention (DSA, ModelConfig::has_sparse_attention) adds a second per-layer
// storage kind beside the latent, the indexer's key per token (index_head_dim values), and two
// calls: select_tokens (the indexer's top-k over those keys, kernels/dsa_indexer.h) and
// attend_latent_sparse (the absorbed attention over the selected tokens only). Its width comes
// from the config like every other cache width; the backends know no model names. GLM-5's "shared"
// layers (ModelConfig::has_indexer false) neither store index keys nor select: no storage is kept
// for them (index_key_storage) and a call for one fails.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/kernels/attention.h"
#include "tachyon/kernels/dsa_indexer.h"
#include "tachyon/kernels/mla_attention.h"
#include "tachyon/model/model_config.h"

namespace tachyon::model {

// What an MLA model's cache holds per layer and token (dense models ignore it: always K and V).
enum class MlaAttentionForm {
  kDecompressed,  // per head: key [qk_nope + qk_rope], value [v_head_dim] (transformers' form)
  kAbsorbed       // shared by all heads: [kv_lora_rank + qk_rope] = [c_kv | k_pe]; serving's form
};

// Values one layer's cache holds per token: kv_lora_rank + qk_rope_head_dim for an absorbed MLA
// model, else kv_size() + v_size(). The block manager counts tokens; only this differs.
int64_t kv_values_per_token(const ModelConfig& config, MlaAttentionForm form);
// Values one layer's index-key cache holds per token: index_head_dim under DSA, else 0.
int64_t index_key_values_per_token(const ModelConfig& config);
// The index-key storage of a cache of `slots` tokens: per layer [slots, index_head_dim] for the
// layers that run their own indexer, empty for GLM-5's "shared" layers (they select nothing: they
// reuse a full layer's top-k, ModelConfig::has_indexer), and no layers at all without DSA.
std::vector<std::vector<float>> index_key_storage(const ModelConfig& config, int64_t slots);
// `layer`'s rows of such storage; fails naming the layer when it has none (no DSA, shared layer).
std::vector<float>& layer_index_keys(const ModelConfig& config, std::vector<std::vector<float>>& index_keys,
                                     int64_t layer);

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

  // The form this backend's cache holds for an MLA model: which pair of calls the model makes.
  virtual MlaAttentionForm mla_form() const = 0;
  // Absorbed MLA only. latent: [num_tokens, kv_lora_rank + qk_rope_head_dim] = [c_kv | k_pe].
  virtual void store_latent(int64_t layer, std::span<const float> latent) = 0;
  // Absorbed MLA only. q: [num_tokens, num_heads, kv_lora_rank + qk_rope_head_dim] = [q_nope @ W_uk
  // | q_pe]; out: [num_tokens, num_heads, kv_lora_rank], the attended latents (before W_uv).
  virtual void attend_latent(int64_t layer, std::span<const float> q, std::span<float> out) = 0;

  // DSA only. index_keys: [num_tokens, index_head_dim], the indexer's keys of this step's tokens.
  virtual void store_index_keys(int64_t layer, std::span<const float> index_keys) = 0;
  // DSA only. q: [num_tokens, index_n_heads, index_head_dim]; weights: [num_tokens, index_n_heads];
  // kept: [num_tokens, index_topk], per token the positions (within its sequence) of the tokens it
  // attends, ascending, -1 padded. store_index_keys of this layer has run.
  virtual void select_tokens(int64_t layer, std::span<const float> q, std::span<const float> weights,
                             std::span<int32_t> kept) = 0;
  // DSA only. attend_latent restricted to `kept` ([num_tokens, index_topk], as select_tokens fills it).
  virtual void attend_latent_sparse(int64_t layer, std::span<const float> q, std::span<const int32_t> kept,
                                    std::span<float> out) = 0;
};

// The attention kernel's shape for `num_queries` new tokens after `first_position` cached ones.
kernels::cpu::AttentionShape attention_shape(const ModelConfig& config, int64_t num_queries, int64_t first_position);
// The same for the absorbed MLA kernel (the same softmax scale as the decompressed form's).
kernels::cpu::MlaAttentionShape mla_attention_shape(const ModelConfig& config, int64_t num_queries,
                                                    int64_t first_position);
// The same for the DSA indexer (scale index_head_dim^-0.5, as DeepseekV32Indexer's softmax_scale).
kernels::cpu::DsaIndexerShape dsa_indexer_shape(const ModelConfig& config, int64_t num_queries,
                                                int64_t first_position);

// Contiguous K/V of one sequence, f32. Serves the reference forward, greedy_generate and tests;
// the engine uses the paged cache. An MLA model in the absorbed form fills `latents` only, any
// other model `keys` and `values` only (the unused ones stay empty); a DSA model (absorbed form
// only) fills `index_keys` too.
struct SequenceKvCache {
  SequenceKvCache(const ModelConfig& config, int64_t capacity,
                  MlaAttentionForm mla_form = MlaAttentionForm::kAbsorbed);
  int64_t capacity = 0;
  int64_t length = 0;  // tokens whose K/V are written
  MlaAttentionForm mla_form = MlaAttentionForm::kAbsorbed;
  std::vector<std::vector<float>> keys;     // per layer [capacity, num_kv_heads, head_dim]
  std::vector<std::vector<float>> values;   // per layer [capacity, num_kv_heads, value_head_dim]
  std::vector<std::vector<float>> latents;  // per layer [capacity, kv_lora_rank + qk_rope_head_dim]
  std::vector<std::vector<float>> index_keys;  // per layer [capacity, index_head_dim] (DSA only; empty: shared layer)
};

// One sequence whose `num_new` new tokens follow the cache's current contents.
class SequenceAttention : public AttentionBackend {
 public:
  SequenceAttention(const ModelConfig& config, SequenceKvCache& cache, int64_t num_new);
  void store_kv(int64_t layer, std::span<const float> k, std::span<const float> v) override;
  void attend(int64_t layer, std::span<const float> q, std::span<float> out) override;
  MlaAttentionForm mla_form() const override { return cache_.mla_form; }
  void store_latent(int64_t layer, std::span<const float> latent) override;
  void attend_latent(int64_t layer, std::span<const float> q, std::span<float> out) override;
  void store_index_keys(int64_t layer, std::span<const float> index_keys) override;
  void select_tokens(int64_t layer, std::span<const float> q, std::span<const float> weights,
                     std::span<int32_t> kept) override;
  void attend_latent_sparse(int64_t layer, std::span<const float> q, std::span<const int32_t> kept,
                            std::span<float> out) override;

 private:
  const ModelConfig& config_;
  SequenceKvCache& cache_;
  int64_t num_new_;
};

}  // namespace tachyon::model
