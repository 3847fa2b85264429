// One PCP rank's attention (see pcp_attention_backend.h).
#include "tachyon/runner/pcp_attention_backend.h"

#include <algorithm>

#include "tachyon/base/check.h"
#include "tachyon/kernels/attention.h"
#include "tachyon/model/dcp_layout.h"
#include "tachyon/runner/dcp_attention_backend.h"

namespace tachyon::runner {
namespace {

// This rank's place in its DCP group (dcp.group non-null).
model::DcpLayout layout_of(const PcpDcp& dcp) {
  return {.size = dcp.group->size(), .rank = dcp.group->rank(), .interleave = dcp.interleave};
}

}  // namespace

std::unique_ptr<model::AttentionBackend> pcp_local_attention(const model::ModelConfig& config, PagedKvCache& cache,
                                                             const core::StepPlan& local, PcpDcp dcp) {
  if (dcp.group == nullptr) return std::make_unique<PagedAttentionBackend>(config, cache, local);
  return std::make_unique<DcpAttentionBackend>(config, cache, local, *dcp.group, dcp.interleave);
}

PcpAttentionBackend::PcpAttentionBackend(const model::ModelConfig& config, PagedKvCache& cache,
                                         const core::StepPlan& plan, const PcpPlan& pcp, dist::Communicator& group,
                                         PcpDcp dcp)
    : config_(config),
      cache_(cache),
      plan_(plan),
      pcp_(pcp),
      group_(group),
      dcp_(dcp),
      local_(pcp_local_attention(config, cache, pcp.local[static_cast<size_t>(group.rank())], dcp)) {
  TACHYON_CHECK(pcp.split && pcp.size == group.size())
      << "PcpAttentionBackend runs split steps of a group of " << group.size() << " ranks (plan for " << pcp.size
      << ", split " << pcp.split << ")";
}

void PcpAttentionBackend::keep(int64_t layer, std::span<const float> rows, int64_t width, std::vector<float>& storage) {
  if (layer != layer_) {
    layer_ = layer;
    gathered_ = false;
    pending_.clear();
  }
  TACHYON_CHECK(!gathered_) << "PCP layer " << layer << ": rows stored after the layer's attention began";
  const int64_t local_rows = static_cast<int64_t>(pcp_.rank_tokens[static_cast<size_t>(group_.rank())].size());
  TACHYON_CHECK(static_cast<int64_t>(rows.size()) == local_rows * width)
      << "PCP store: " << rows.size() << " values for " << local_rows << " local rows of width " << width;
  pending_.push_back({std::vector<float>(rows.begin(), rows.end()), width, &storage});
}

int64_t PcpAttentionBackend::slot_of(int64_t token) const {
  const core::ScheduledSequence& s =
      plan_.sequences[static_cast<size_t>(pcp_.token_sequence[static_cast<size_t>(token)])];
  const int64_t position = plan_.positions[static_cast<size_t>(token)];
  return int64_t{s.block_table[static_cast<size_t>(position / plan_.block_size)]} * plan_.block_size +
         position % plan_.block_size;
}

std::vector<std::vector<int64_t>> PcpAttentionBackend::sent_rows() const {
  std::vector<std::vector<int64_t>> sent(static_cast<size_t>(group_.size()));
  for (int r = 0; r < group_.size(); ++r) {
    const std::vector<int64_t>& tokens = pcp_.rank_tokens[static_cast<size_t>(r)];
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (dcp_.group == nullptr || layout_of(dcp_).owns(slot_of(tokens[i]) % plan_.block_size)) {
        sent[static_cast<size_t>(r)].push_back(static_cast<int64_t>(i));
      }
    }
  }
  return sent;
}

void PcpAttentionBackend::gather(int64_t layer) {
  TACHYON_CHECK(layer == layer_ && !pending_.empty()) << "PCP layer " << layer << ": attention before any store";
  if (gathered_) return;
  gathered_ = true;
  const int size = group_.size(), rank = group_.rank();
  const std::vector<std::vector<int64_t>> sent = sent_rows();
  const std::vector<int64_t>& mine = sent[static_cast<size_t>(rank)];
  const std::vector<int64_t>& my_tokens = pcp_.rank_tokens[static_cast<size_t>(rank)];
  std::vector<int64_t> tokens;  // [rows received]: the plan token of each gathered row, in rank order
  for (int r = 0; r < size; ++r) {
    for (int64_t i : sent[static_cast<size_t>(r)]) tokens.push_back(pcp_.rank_tokens[static_cast<size_t>(r)][static_cast<size_t>(i)]);
  }
  const int64_t total = static_cast<int64_t>(tokens.size());
  std::vector<int64_t> positions(mine.size());  // sent with the rows: where each lands
  for (size_t j = 0; j < mine.size(); ++j) positions[j] = plan_.positions[static_cast<size_t>(my_tokens[static_cast<size_t>(mine[j])])];

  // Per item kind its own recv_counts ([size] bytes), kept alive for the call; the rows sent,
  // [rows sent, width], are the pending rows themselves unless DCP dropped some.
  std::vector<std::vector<size_t>> counts(pending_.size() + 1, std::vector<size_t>(static_cast<size_t>(size)));
  std::vector<std::vector<float>> received(pending_.size()), sending(pending_.size());
  std::vector<int64_t> all_positions(static_cast<size_t>(total));
  std::vector<dist::GatherItem> items;
  for (size_t k = 0; k < pending_.size(); ++k) {
    const int64_t width = pending_[k].width;
    for (int r = 0; r < size; ++r) {
      counts[k][static_cast<size_t>(r)] = sent[static_cast<size_t>(r)].size() * static_cast<size_t>(width) * sizeof(float);
    }
    const std::vector<float>* rows = &pending_[k].rows;
    if (mine.size() != my_tokens.size()) {
      sending[k].resize(mine.size() * static_cast<size_t>(width));
      for (size_t j = 0; j < mine.size(); ++j) {
        std::copy_n(pending_[k].rows.data() + mine[j] * width, width, sending[k].data() + static_cast<int64_t>(j) * width);
      }
      rows = &sending[k];
    }
    received[k].resize(static_cast<size_t>(total * width));
    items.push_back({rows->data(), rows->size() * sizeof(float), received[k].data(), counts[k]});
  }
  std::vector<size_t>& position_counts = counts.back();
  for (int r = 0; r < size; ++r) position_counts[static_cast<size_t>(r)] = sent[static_cast<size_t>(r)].size() * sizeof(int64_t);
  items.push_back({positions.data(), positions.size() * sizeof(int64_t), all_positions.data(), position_counts});
  group_.all_gatherv(items, nullptr);

  // Row i came from plan token tokens[i] of its sequence at the position its sender sent; with
  // DCP it lands at its local slot (every received row is one this rank owns).
  std::vector<int64_t> slots(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) {
    const core::ScheduledSequence& s =
        plan_.sequences[static_cast<size_t>(pcp_.token_sequence[static_cast<size_t>(tokens[static_cast<size_t>(i)])])];
    const int64_t position = all_positions[static_cast<size_t>(i)];
    TACHYON_CHECK(position >= 0 && position < s.num_computed + s.num_tokens)
        << "PCP: gathered position " << position << " outside sequence " << s.sequence_id;
    const int64_t slot = int64_t{s.block_table[static_cast<size_t>(position / plan_.block_size)]} * plan_.block_size +
                         position % plan_.block_size;
    if (dcp_.group == nullptr) {
      slots[static_cast<size_t>(i)] = slot;
      continue;
    }
    const model::DcpLayout layout = layout_of(dcp_);
    TACHYON_CHECK(layout.owns(slot % plan_.block_size))
        << "PCP: gathered position " << position << " belongs to DCP rank " << layout.owner(slot % plan_.block_size)
        << ", not to this rank's " << layout.rank << " (a PCP group must hold one DCP index)";
    slots[static_cast<size_t>(i)] = layout.local_slot(slot, plan_.block_size);
  }
  for (size_t k = 0; k < pending_.size(); ++k) {
    kernels::cpu::store_rows_paged(pending_[k].storage->data(), received[k].data(), slots.data(), total,
                                   pending_[k].width);
  }
}

void PcpAttentionBackend::store_kv(int64_t layer, std::span<const float> k, std::span<const float> v) {
  TACHYON_CHECK(!cache_.keys.empty()) << "store_kv: this paged cache holds MLA latents";
  std::vector<float> k_fp8, v_fp8;  // each rank's rows as the cache stores them (row by row: the same on any rank)
  keep(layer, cache_.as_stored(PagedKvCache::Rows::kKeys, k, config_, k_fp8), cache_.kv_size,
       cache_.keys[static_cast<size_t>(layer)]);
  keep(layer, cache_.as_stored(PagedKvCache::Rows::kValues, v, config_, v_fp8), cache_.v_size,
       cache_.values[static_cast<size_t>(layer)]);
}

void PcpAttentionBackend::attend(int64_t layer, std::span<const float> q, std::span<float> out) {
  gather(layer);
  local_->attend(layer, q, out);
}

void PcpAttentionBackend::store_latent(int64_t layer, std::span<const float> latent) {
  TACHYON_CHECK(!cache_.latents.empty()) << "store_latent: this paged cache holds per-head K/V";
  std::vector<float> latent_fp8;
  keep(layer, cache_.as_stored(PagedKvCache::Rows::kLatent, latent, config_, latent_fp8), cache_.latent_size,
       cache_.latents[static_cast<size_t>(layer)]);
}

void PcpAttentionBackend::attend_latent(int64_t layer, std::span<const float> q, std::span<float> out) {
  gather(layer);
  local_->attend_latent(layer, q, out);
}

void PcpAttentionBackend::store_index_keys(int64_t layer, std::span<const float> index_keys) {
  std::vector<float> index_fp8;
  keep(layer, cache_.as_stored(PagedKvCache::Rows::kIndexKeys, index_keys, config_, index_fp8), cache_.index_key_size,
       model::layer_index_keys(config_, cache_.index_keys, layer));
}

void PcpAttentionBackend::select_tokens(int64_t layer, std::span<const float> q, std::span<const float> weights,
                                        std::span<int32_t> kept) {
  gather(layer);
  local_->select_tokens(layer, q, weights, kept);
}

void PcpAttentionBackend::attend_latent_sparse(int64_t layer, std::span<const float> q,
                                               std::span<const int32_t> kept, std::span<float> out) {
  gather(layer);
  local_->attend_latent_sparse(layer, q, kept, out);
}

}  // namespace tachyon::runner
