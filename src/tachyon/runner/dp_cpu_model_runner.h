// DpCpuModelRunner: data-parallel attention on CPU thread ranks (--dp D [--tp T] --device cpu),
// for MoE models. D replicas of T tensor-parallel ranks each (D * T threads; their groups are
// dist::CpuProcessGroups' for ParallelConfig{dp = D, tp = T, ep = D * T}, rank d * T + t): each replica holds the attention, the dense layers, the
// embedding and the LM head (split over its T ranks as TpCpuModelRunner splits them), its own
// paged KV cache, and runs its own sequences; the MoE layers run across all D * T ranks as expert
// parallelism (rank g holds experts [g * E / (D * T), ...) whole; model/tp_moe.h), so a token's
// row travels only to the ranks holding its experts and back (all_to_all_v).
//
// Each step the engine thread cuts the StepPlan into one plan per replica (dp_split.h: sequences
// placed round-robin, sticky through their first KV block); every rank reads its replica's plan,
// so the ranks agree on the step's shape with no exchange at all, and a replica with nothing to
// run this step goes through the MoE layers with zero rows (TpDenseModel::idle_forward) to serve
// the others' tokens. The logits rows come back in the step's order and are sampled on the
// engine thread as the CPU runner samples them.
// Not built: a KV block pool per replica. The engine's one KvCacheManager plans blocks for all
// replicas, so each replica's cache is allocated for the whole pool (num_blocks) and holds only
// its sequences' blocks: --dp adds no KV capacity yet (docs/parallelism.md).
// At destruction it reports on stderr how many sequences each replica was given.
// Refused: plans with drafts (verifies_drafts() is false) or asking for hidden states.
// Tests: tests/unit/test_dp_families.cpp.
#pragma once

#include <memory>
#include <vector>

#include "tachyon/dist/cpu_process_groups.h"
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/runner/dp_split.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/paged_attention_backend.h"
#include "tachyon/runner/rank_workers.h"

namespace tachyon::runner {

class DpCpuModelRunner : public SynchronousModelRunner {
 public:
  // `full` (f32) over dp_size >= 2 replicas of tp_size ranks (model::check_dp_size first).
  DpCpuModelRunner(const model::ModelWeights& full, int dp_size, int tp_size, int32_t num_blocks, int32_t block_size);
  ~DpCpuModelRunner() override;
  DpCpuModelRunner(const DpCpuModelRunner&) = delete;
  DpCpuModelRunner& operator=(const DpCpuModelRunner&) = delete;

  int64_t vocab_size() const override { return vocab_size_; }
  bool verifies_drafts() const override { return false; }
  int dp_size() const { return placement_.size(); }
  const DpPlacement& placement() const { return placement_; }

 protected:
  core::StepOutput run(const core::StepPlan& plan) override;

 private:
  struct Rank {
    Rank(dist::ProcessGroups groups, const model::ModelWeights& full, int32_t num_blocks, int32_t block_size);
    dist::ProcessGroups groups;  // tp: the replica's ranks; ep: every rank (the experts' group)
    model::TpDenseModel model;
    PagedKvCache cache;
    std::vector<float> logits;  // the last step's logits of the replica's rows
  };

  int64_t vocab_size_;
  int tp_size_;
  dist::CpuProcessGroups process_groups_;
  std::vector<std::unique_ptr<Rank>> ranks_;  // [dp * tp], rank d * tp + t
  DpPlacement placement_;
  RankWorkers workers_;  // last: its threads stop before the ranks they use are destroyed
};

}  // namespace tachyon::runner
