// One DCP rank's attention over its share of the cache (see dcp_attention_backend.h).
#include "tachyon/runner/dcp_attention_backend.h"

#include <algorithm>

#include "tachyon/base/check.h"
#include "tachyon/kernels/dsa_indexer.h"
#include "tachyon/model/dcp_partial_attention.h"
#include "tachyon/model/dcp_topk.h"

namespace tachyon::runner {

DcpAttentionBackend::DcpAttentionBackend(const model::ModelConfig& config, PagedKvCache& cache,
                                         const core::StepPlan& plan, dist::Communicator& group, int interleave)
    : config_(config),
      cache_(cache),
      plan_(plan),
      group_(group),
      layout_{.size = group.size(), .rank = group.rank(), .interleave = interleave} {
  TACHYON_CHECK(interleave >= 1 && plan.block_size % (interleave * group.size()) == 0)
      << "decode context parallelism over " << group.size() << " ranks with interleave " << interleave
      << " needs a block size that is a multiple of " << interleave * group.size() << ", got " << plan.block_size;
  TACHYON_CHECK(plan.block_size == cache.block_size * group.size())
      << "DCP rank cache block size " << cache.block_size << " is not plan block size " << plan.block_size << " / "
      << group.size();
  TACHYON_CHECK(!cache.latents.empty() && cache.mla_form == model::MlaAttentionForm::kAbsorbed && !cache.fp8)
      << "decode context parallelism runs latent attention cached in the absorbed form in f32 rows only";
  for (int64_t slot : plan.slot_mapping) {
    TACHYON_CHECK(slot >= 0 && slot < static_cast<int64_t>(cache.num_blocks) * plan.block_size)
        << "slot " << slot << " outside the KV cache";
  }
}

void DcpAttentionBackend::store_kv(int64_t, std::span<const float>, std::span<const float>) {
  TACHYON_FAIL() << "decode context parallelism splits MLA's latent cache; per-head K/V are not split";
}

void DcpAttentionBackend::attend(int64_t, std::span<const float>, std::span<float>) {
  TACHYON_FAIL() << "decode context parallelism splits MLA's latent cache; per-head K/V are not split";
}

int64_t DcpAttentionBackend::local_row(const core::ScheduledSequence& sequence, int64_t local) const {
  const int64_t block_size = cache_.block_size;
  return static_cast<int64_t>(sequence.block_table[static_cast<size_t>(local / block_size)]) * block_size +
         local % block_size;
}

void DcpAttentionBackend::store_owned(std::vector<float>& storage, std::span<const float> rows, int64_t width) const {
  TACHYON_CHECK(static_cast<int64_t>(rows.size()) == plan_.num_tokens() * width)
      << "DCP store: " << rows.size() << " values for " << plan_.num_tokens() << " tokens of width " << width;
  for (int64_t t = 0; t < plan_.num_tokens(); ++t) {
    const int64_t slot = plan_.slot_mapping[static_cast<size_t>(t)];
    if (!layout_.owns(slot % plan_.block_size)) continue;  // another rank of the group keeps it
    std::copy_n(rows.data() + t * width, width, storage.data() + layout_.local_slot(slot, plan_.block_size) * width);
  }
}

void DcpAttentionBackend::store_latent(int64_t layer, std::span<const float> latent) {
  store_owned(cache_.latents[static_cast<size_t>(layer)], latent, cache_.latent_size);
}

void DcpAttentionBackend::store_index_keys(int64_t layer, std::span<const float> index_keys) {
  store_owned(model::layer_index_keys(config_, cache_.index_keys, layer), index_keys, cache_.index_key_size);
}

void DcpAttentionBackend::attend_rows(int64_t layer, std::span<const float> q, const RowLists& rows,
                                      std::span<float> out) {
  const int64_t n = plan_.num_tokens(), heads = config_.num_attention_heads, size = group_.size();
  const int64_t width = cache_.latent_size, rank = config_.kv_lora_rank, group_heads = heads * size;
  TACHYON_CHECK(static_cast<int64_t>(q.size()) == n * heads * width)
      << "DCP attend: " << q.size() << " query values for " << n << " tokens of " << heads << " heads x " << width;
  // The group's queries: each rank holds its TP heads, and every rank's tokens are needed by all.
  std::vector<float> gathered(static_cast<size_t>(size) * q.size());  // [size, n, heads, width]
  group_.all_gather(q.data(), gathered.data(), q.size_bytes(), nullptr);
  std::vector<float> group_q(gathered.size());  // [n, size * heads, width], rank r's heads at [r * heads, ...)
  for (int64_t r = 0; r < size; ++r) {
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(gathered.data() + ((r * n + t) * heads) * width, heads * width,
                  group_q.data() + (t * group_heads + r * heads) * width);
    }
  }
  kernels::cpu::MlaAttentionShape shape = model::mla_attention_shape(config_, 1, 0);
  shape.num_heads = group_heads;
  std::vector<float> partial_out(static_cast<size_t>(n * group_heads * rank));  // [n, group heads, rank]
  std::vector<float> partial_lse(static_cast<size_t>(n * group_heads));         // [n, group heads]
  const float* cache = cache_.latents[static_cast<size_t>(layer)].data();
  for (int64_t t = 0; t < n; ++t) {
    model::partial_latent_attention(partial_out.data() + t * group_heads * rank, partial_lse.data() + t * group_heads,
                                    group_q.data() + t * group_heads * width, cache, rows[static_cast<size_t>(t)],
                                    shape);
  }
  // ONE all_to_all_v sends each rank only the heads it restores: rank q's run for rank r holds
  // q's partials of r's heads, [n, heads, rank] and [n, heads]; every rank receives the group's
  // partials of its own heads, [size, n, heads, ...] in rank order (1/size of a gather's bytes).
  const int64_t run_out = n * heads * rank, run_lse = n * heads;
  std::vector<float> send_out(static_cast<size_t>(size * run_out)), send_lse(static_cast<size_t>(size * run_lse));
  for (int64_t r = 0; r < size; ++r) {
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(partial_out.data() + (t * group_heads + r * heads) * rank, heads * rank,
                  send_out.data() + r * run_out + t * heads * rank);
      std::copy_n(partial_lse.data() + t * group_heads + r * heads, heads, send_lse.data() + r * run_lse + t * heads);
    }
  }
  std::vector<float> recv_out(send_out.size()), recv_lse(send_lse.size());
  const std::vector<size_t> out_counts(static_cast<size_t>(size), static_cast<size_t>(run_out) * sizeof(float));
  const std::vector<size_t> lse_counts(static_cast<size_t>(size), static_cast<size_t>(run_lse) * sizeof(float));
  const dist::AllToAllItem items[] = {
      {send_out.data(), out_counts, recv_out.data(), out_counts},
      {send_lse.data(), lse_counts, recv_lse.data(), lse_counts},
  };
  group_.all_to_all_v(items, nullptr);
  model::merge_attention_partials(out.data(), recv_out.data(), recv_lse.data(),
                                  {.sources = size,
                                   .num_tokens = n,
                                   .all_heads = heads,
                                   .head_begin = 0,
                                   .heads = heads,
                                   .width = rank});
}

void DcpAttentionBackend::attend_latent(int64_t layer, std::span<const float> q, std::span<float> out) {
  RowLists rows(static_cast<size_t>(plan_.num_tokens()));
  for (const core::ScheduledSequence& sequence : plan_.sequences) {
    for (int64_t i = 0; i < sequence.num_tokens; ++i) {
      // Causal by global position: verify rows of speculative decoding see no later draft.
      const int64_t visible = layout_.local_count(sequence.num_computed + i + 1);
      std::vector<int64_t>& token_rows = rows[static_cast<size_t>(sequence.first_token + i)];
      for (int64_t k = 0; k < visible; ++k) token_rows.push_back(local_row(sequence, k));
    }
  }
  attend_rows(layer, q, rows, out);
}

void DcpAttentionBackend::attend_latent_sparse(int64_t layer, std::span<const float> q,
                                               std::span<const int32_t> kept, std::span<float> out) {
  const int64_t topk = config_.index_topk;
  RowLists rows(static_cast<size_t>(plan_.num_tokens()));
  for (const core::ScheduledSequence& sequence : plan_.sequences) {
    for (int64_t i = 0; i < sequence.num_tokens; ++i) {
      const int64_t token = sequence.first_token + i;
      std::vector<int64_t>& token_rows = rows[static_cast<size_t>(token)];
      for (int64_t j = 0; j < topk; ++j) {
        const int32_t position = kept[static_cast<size_t>(token * topk + j)];
        if (position >= 0 && layout_.owns(position)) token_rows.push_back(local_row(sequence, layout_.local_index(position)));
      }
    }
  }
  attend_rows(layer, q, rows, out);
}

void DcpAttentionBackend::select_tokens(int64_t layer, std::span<const float> q, std::span<const float> weights,
                                        std::span<int32_t> kept) {
  const int64_t topk = config_.index_topk, n = plan_.num_tokens();
  const int64_t q_stride = config_.index_n_heads * config_.index_head_dim;
  const std::vector<float>& keys = model::layer_index_keys(config_, cache_.index_keys, layer);
  std::vector<model::IndexCandidate> local(static_cast<size_t>(n * topk));  // [n, topk], padding by default
  for (const core::ScheduledSequence& sequence : plan_.sequences) {
    for (int64_t i = 0; i < sequence.num_tokens; ++i) {
      const int64_t token = sequence.first_token + i;
      const int64_t visible = layout_.local_count(sequence.num_computed + i + 1);
      if (visible == 0) continue;
      // The unsplit kernel's scores of this query over the local keys: one query whose causal
      // range is exactly the visible local tokens (local token k is row k of the local table).
      const kernels::cpu::DsaIndexerShape shape = model::dsa_indexer_shape(config_, 1, visible - 1);
      std::vector<float> scores(static_cast<size_t>(visible));
      kernels::cpu::paged_dsa_index_scores(scores.data(), q.data() + token * q_stride,
                                           weights.data() + token * config_.index_n_heads, keys.data(),
                                           sequence.block_table.data(), cache_.block_size, shape);
      std::vector<int32_t> positions(static_cast<size_t>(visible));
      for (int64_t k = 0; k < visible; ++k) positions[static_cast<size_t>(k)] = static_cast<int32_t>(layout_.global_position(k));
      model::local_topk_candidates(scores, positions, topk, local.data() + token * topk);
    }
  }
  const std::vector<model::IndexCandidate> gathered = model::exchange_candidates(group_, local);  // [size, n, topk]
  std::vector<model::IndexCandidate> candidates(static_cast<size_t>(group_.size() * topk));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < group_.size(); ++r) {
      std::copy_n(gathered.data() + (r * n + t) * topk, topk, candidates.data() + r * topk);
    }
    model::merge_topk_candidates(candidates, topk, kept.data() + t * topk);
  }
}

}  // namespace tachyon::runner
