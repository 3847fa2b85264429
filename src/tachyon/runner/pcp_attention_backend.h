// PcpAttentionBackend: the AttentionBackend of one rank of a prefill-context-parallel (PCP) group
// on CPU thread ranks (--prefill-context-parallel-size N, docs/parallelism.md). The rank's model
// forward runs only its own rows of the step (PcpPlan::local, runner/pcp_plan.h); its cache is a
// whole PagedKvCache, the same on every rank of the group.
//
// Per layer: the store_* calls keep this rank's rows aside (latent, or K and V; DSA index keys);
// the layer's first attention call (attend, attend_latent, select_tokens, attend_latent_sparse)
// makes ONE grouped all_gatherv of everything attention needs, mixed dtypes in one collective:
// the rows (f32) and their positions (int64). Each gathered row is written at the slot its sent
// position names in its sequence's block table, so every rank's cache then holds the whole
// step; the local queries then attend the full context through a PagedAttentionBackend over the
// local plan (the unsplit kernels: per query the same rows in the same order). The later calls of
// the layer go straight to it. The model stores the latent before the DSA indexer selects
// (model/dense_model.cpp), which is what lets one collective carry both.
// With decode context parallelism beside PCP (--dcp D, PcpDcp below) the rank's cache holds only
// the rows model::DcpLayout deals it among its DCP group (the TP ranks of its PCP rank), so PCP
// writes the DCP layout directly and no later step re-lays the cache. Every rank of a PCP group
// holds the same tp_rank, so the same DCP index (dist::RankLayout: dcp_rank = tp_rank % D): the
// rows all receivers of a sender keep are the same, and the sender sends only those (sent_rows,
// computed from the plan alike on every rank: no count exchange), about 1/D of its rows. The
// local queries then attend through a DcpAttentionBackend over the local plan (partials over each
// rank's rows, LSE-merged), since no rank holds the whole context.
// A step that is not split (PcpPlan::split false: decodes) never reaches this class.
// Tests: tests/unit/test_pcp_families.cpp (counts collectives per layer).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tachyon/core/step_plan.h"
#include "tachyon/dist/communicator.h"
#include "tachyon/model/attention_backend.h"
#include "tachyon/runner/paged_attention_backend.h"
#include "tachyon/runner/pcp_plan.h"

namespace tachyon::runner {

// Decode context parallelism beside PCP: this rank's DCP group, null without DCP (the cache then
// holds every row), and the tokens per run (model::DcpLayout).
struct PcpDcp {
  dist::Communicator* group = nullptr;
  int interleave = 1;
};

// The attention of a rank's own queries over its cache: a PagedAttentionBackend, or with DCP a
// DcpAttentionBackend over the DCP group.
std::unique_ptr<model::AttentionBackend> pcp_local_attention(const model::ModelConfig& config, PagedKvCache& cache,
                                                             const core::StepPlan& local, PcpDcp dcp);

class PcpAttentionBackend : public model::AttentionBackend {
 public:
  // plan: the step (every rank's rows); pcp: its split; group: the PCP group, this rank is
  // group.rank(); cache: this rank's cache, block size plan.block_size (every row), or
  // plan.block_size / D with DCP (its share).
  PcpAttentionBackend(const model::ModelConfig& config, PagedKvCache& cache, const core::StepPlan& plan,
                      const PcpPlan& pcp, dist::Communicator& group, PcpDcp dcp = {});
  void store_kv(int64_t layer, std::span<const float> k, std::span<const float> v) override;
  void attend(int64_t layer, std::span<const float> q, std::span<float> out) override;
  model::MlaAttentionForm mla_form() const override { return local_->mla_form(); }
  void store_latent(int64_t layer, std::span<const float> latent) override;
  void attend_latent(int64_t layer, std::span<const float> q, std::span<float> out) override;
  void store_index_keys(int64_t layer, std::span<const float> index_keys) override;
  void select_tokens(int64_t layer, std::span<const float> q, std::span<const float> weights,
                     std::span<int32_t> kept) override;
  void attend_latent_sparse(int64_t layer, std::span<const float> q, std::span<const int32_t> kept,
                            std::span<float> out) override;

 private:
  // One kind of row this layer stores: this rank's rows and where the whole step's go.
  struct Pending {
    std::vector<float> rows;  // [local rows, width]
    int64_t width = 0;
    std::vector<float>* storage = nullptr;  // the cache's [slots, width] rows of this layer
  };
  void keep(int64_t layer, std::span<const float> rows, int64_t width, std::vector<float>& storage);
  // The layer's one collective and the writes into the cache; once per layer, before attention.
  void gather(int64_t layer);
  // The engine slot (block * block_size + offset) of plan token `token`.
  int64_t slot_of(int64_t token) const;
  // Per PCP rank r: the indices into pcp.rank_tokens[r] of the rows r sends (and every rank keeps):
  // all of them, or with DCP those whose slot this rank's DCP index owns. [size][rows r sends]
  std::vector<std::vector<int64_t>> sent_rows() const;

  const model::ModelConfig& config_;
  PagedKvCache& cache_;
  const core::StepPlan& plan_;
  const PcpPlan& pcp_;
  dist::Communicator& group_;
  PcpDcp dcp_;
  std::unique_ptr<model::AttentionBackend> local_;  // the local queries over the (gathered) cache
  int64_t layer_ = -1;           // the layer whose rows are pending
  bool gathered_ = false;        // this layer's collective has run
  std::vector<Pending> pending_;
};

}  // namespace tachyon::runner
