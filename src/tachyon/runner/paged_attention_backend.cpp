#include "tachyon/runner/paged_attention_backend.h"

#include <cmath>

#include "tachyon/base/check.h"
#include "tachyon/base/huge_pages.h"
#include "tachyon/kernels/attention.h"
#include "tachyon/kernels/dsa_indexer.h"
#include "tachyon/kernels/mla_attention.h"
#include "tachyon/kernels/sparse_mla_attention.h"
#include "tachyon/tensor/fp8.h"

namespace tachyon::runner {
namespace {

// `rows` ([count, width]) as an FP8 cache stores them (paged_attention_backend.h): each row's first
// width - keep values in groups of `group` with a factor each; the last `keep` (the latent's RoPE
// part) as they are.
std::vector<float> fp8_cache_rows(std::span<const float> rows, int64_t width, int64_t group, int64_t keep = 0) {
  std::vector<float> out(rows.begin(), rows.end());
  const int64_t count = static_cast<int64_t>(rows.size()) / width, quantized = width - keep;
  for (int64_t r = 0; r < count; ++r) {
    fp8_block_round_trip(std::span<float>(out.data() + r * width, static_cast<size_t>(quantized)), 1, quantized, 1,
                         group);
  }
  return out;
}

// One zeroed buffer of `values` per layer, each faulted in once, in huge pages where offered
// (base/huge_pages.h).
std::vector<std::vector<float>> zeroed_layers(int64_t layers, size_t values) {
  std::vector<std::vector<float>> out(static_cast<size_t>(layers));
  for (std::vector<float>& layer : out) layer = huge_vector<float>(values);
  return out;
}

}  // namespace

std::span<const float> PagedKvCache::as_stored(Rows kind, std::span<const float> rows, const model::ModelConfig& config,
                                               std::vector<float>& storage) const {
  if (!fp8) return rows;
  switch (kind) {
    case Rows::kKeys: storage = fp8_cache_rows(rows, kv_size, config.head_dim); break;  // per token and KV head
    case Rows::kValues: storage = fp8_cache_rows(rows, v_size, config.value_head_dim()); break;
    case Rows::kLatent:  // the kv_lora_rank part per 128 values, RoPE kept
      storage = fp8_cache_rows(rows, latent_size, 128, config.qk_rope_head_dim);
      break;
    case Rows::kIndexKeys: storage = fp8_cache_rows(rows, index_key_size, index_key_size); break;  // per token
  }
  return storage;
}

PagedKvCache::PagedKvCache(const model::ModelConfig& config, int32_t blocks, int32_t tokens_per_block,
                           model::MlaAttentionForm form, bool fp8_rows)
    : num_blocks(blocks), block_size(tokens_per_block), fp8(fp8_rows), mla_form(form) {
  const size_t slots = static_cast<size_t>(blocks) * static_cast<size_t>(tokens_per_block);
  TACHYON_CHECK(!config.has_sparse_attention() || form == model::MlaAttentionForm::kAbsorbed)
      << config.architecture << ": sparse attention (DSA) runs in the absorbed MLA form only";
  if (config.is_mla() && form == model::MlaAttentionForm::kAbsorbed) {
    latent_size = model::kv_values_per_token(config, form);
    latents = zeroed_layers(config.num_hidden_layers, slots * static_cast<size_t>(latent_size));
    index_key_size = model::index_key_values_per_token(config);
    index_keys = model::index_key_storage(config, static_cast<int64_t>(slots));
    return;
  }
  kv_size = config.kv_size();
  v_size = config.v_size();
  keys = zeroed_layers(config.num_hidden_layers, slots * static_cast<size_t>(kv_size));
  values = zeroed_layers(config.num_hidden_layers, slots * static_cast<size_t>(v_size));
}

PagedAttentionBackend::PagedAttentionBackend(const model::ModelConfig& config, PagedKvCache& cache,
                                             const core::StepPlan& plan)
    : config_(config), cache_(cache), plan_(plan) {
  TACHYON_CHECK(plan.block_size == cache.block_size)
      << "plan block size " << plan.block_size << " != cache block size " << cache.block_size;
  for (int64_t slot : plan.slot_mapping) {
    TACHYON_CHECK(slot >= 0 && slot < static_cast<int64_t>(cache.num_blocks) * cache.block_size)
        << "slot " << slot << " outside the KV cache";
  }
}

void PagedAttentionBackend::store_kv(int64_t layer, std::span<const float> k, std::span<const float> v) {
  TACHYON_CHECK(!cache_.keys.empty()) << "store_kv: this paged cache holds MLA latents (the absorbed form); "
                                         "build it with MlaAttentionForm::kDecompressed to store per-head K/V";
  std::vector<float> k_fp8, v_fp8;
  k = cache_.as_stored(PagedKvCache::Rows::kKeys, k, config_, k_fp8);
  v = cache_.as_stored(PagedKvCache::Rows::kValues, v, config_, v_fp8);
  kernels::cpu::store_rows_paged(cache_.keys[static_cast<size_t>(layer)].data(), k.data(), plan_.slot_mapping.data(),
                                 plan_.num_tokens(), cache_.kv_size);
  kernels::cpu::store_rows_paged(cache_.values[static_cast<size_t>(layer)].data(), v.data(), plan_.slot_mapping.data(),
                                 plan_.num_tokens(), cache_.v_size);
}

void PagedAttentionBackend::attend(int64_t layer, std::span<const float> q, std::span<float> out) {
  TACHYON_CHECK(!cache_.keys.empty()) << "attend: this paged cache holds MLA latents; use attend_latent";
  const int64_t q_stride = config_.q_size();
  const int64_t out_stride = config_.num_attention_heads * config_.value_head_dim();
  for (const core::ScheduledSequence& sequence : plan_.sequences) {
    const kernels::cpu::AttentionShape shape =
        model::attention_shape(config_, sequence.num_tokens, sequence.num_computed);
    kernels::cpu::paged_attention(out.data() + sequence.first_token * out_stride, q.data() + sequence.first_token * q_stride,
                                  cache_.keys[static_cast<size_t>(layer)].data(),
                                  cache_.values[static_cast<size_t>(layer)].data(), sequence.block_table.data(),
                                  cache_.block_size, shape);
  }
}

void PagedAttentionBackend::store_latent(int64_t layer, std::span<const float> latent) {
  TACHYON_CHECK(!cache_.latents.empty()) << "store_latent: this paged cache holds per-head K/V; build it with "
                                            "MlaAttentionForm::kAbsorbed for an MLA model to store latents";
  TACHYON_CHECK(static_cast<int64_t>(latent.size()) == plan_.num_tokens() * cache_.latent_size)
      << "store_latent: " << latent.size() << " values for " << plan_.num_tokens() << " tokens of width "
      << cache_.latent_size;
  std::vector<float> latent_fp8;
  latent = cache_.as_stored(PagedKvCache::Rows::kLatent, latent, config_, latent_fp8);
  kernels::cpu::store_rows_paged(cache_.latents[static_cast<size_t>(layer)].data(), latent.data(),
                                 plan_.slot_mapping.data(), plan_.num_tokens(), cache_.latent_size);
}

void PagedAttentionBackend::attend_latent(int64_t layer, std::span<const float> q, std::span<float> out) {
  const int64_t q_stride = config_.num_attention_heads * cache_.latent_size;
  const int64_t out_stride = config_.num_attention_heads * config_.kv_lora_rank;
  for (const core::ScheduledSequence& sequence : plan_.sequences) {
    const kernels::cpu::MlaAttentionShape shape =
        model::mla_attention_shape(config_, sequence.num_tokens, sequence.num_computed);
    kernels::cpu::paged_mla_attention(out.data() + sequence.first_token * out_stride,
                                      q.data() + sequence.first_token * q_stride,
                                      cache_.latents[static_cast<size_t>(layer)].data(), sequence.block_table.data(),
                                      cache_.block_size, shape);
  }
}

void PagedAttentionBackend::store_index_keys(int64_t layer, std::span<const float> index_keys) {
  std::vector<float>& layer_keys = model::layer_index_keys(config_, cache_.index_keys, layer);
  TACHYON_CHECK(static_cast<int64_t>(index_keys.size()) == plan_.num_tokens() * cache_.index_key_size)
      << "store_index_keys: " << index_keys.size() << " values for " << plan_.num_tokens() << " tokens of width "
      << cache_.index_key_size;
  std::vector<float> index_fp8;
  index_keys = cache_.as_stored(PagedKvCache::Rows::kIndexKeys, index_keys, config_, index_fp8);
  kernels::cpu::store_rows_paged(layer_keys.data(), index_keys.data(),
                                 plan_.slot_mapping.data(), plan_.num_tokens(), cache_.index_key_size);
}

void PagedAttentionBackend::select_tokens(int64_t layer, std::span<const float> q, std::span<const float> weights,
                                          std::span<int32_t> kept) {
  const int64_t q_stride = config_.index_n_heads * config_.index_head_dim;
  const std::vector<float>& layer_keys = model::layer_index_keys(config_, cache_.index_keys, layer);
  for (const core::ScheduledSequence& sequence : plan_.sequences) {
    const kernels::cpu::DsaIndexerShape shape =
        model::dsa_indexer_shape(config_, sequence.num_tokens, sequence.num_computed);
    std::vector<float> scores(static_cast<size_t>(sequence.num_tokens * (sequence.num_computed + sequence.num_tokens)));
    kernels::cpu::paged_dsa_index_scores(scores.data(), q.data() + sequence.first_token * q_stride,
                                         weights.data() + sequence.first_token * config_.index_n_heads,
                                         layer_keys.data(), sequence.block_table.data(), cache_.block_size, shape);
    kernels::cpu::dsa_select_topk(kept.data() + sequence.first_token * config_.index_topk, scores.data(), shape);
  }
}

void PagedAttentionBackend::attend_latent_sparse(int64_t layer, std::span<const float> q,
                                                 std::span<const int32_t> kept, std::span<float> out) {
  const int64_t q_stride = config_.num_attention_heads * cache_.latent_size;
  const int64_t out_stride = config_.num_attention_heads * config_.kv_lora_rank;
  for (const core::ScheduledSequence& sequence : plan_.sequences) {
    const kernels::cpu::MlaAttentionShape shape =
        model::mla_attention_shape(config_, sequence.num_tokens, sequence.num_computed);
    kernels::cpu::paged_sparse_mla_attention(
        out.data() + sequence.first_token * out_stride, q.data() + sequence.first_token * q_stride,
        cache_.latents[static_cast<size_t>(layer)].data(), kept.data() + sequence.first_token * config_.index_topk,
        config_.index_topk, sequence.block_table.data(), cache_.block_size, shape);
  }
}

}  // namespace tachyon::runner
