// DpCpuModelRunner: data-parallel attention on CPU thread ranks (--dp D [--tp T] --device cpu),
// for MoE models. D replicas of T tensor-parallel ranks each (D * T threads; their groups are
// dist::CpuProcessGroups' for ParallelConfig{dp = D, tp = T, ep = D * T}, rank d * T + t): each replica holds the attention, the dense layers, the
// embedding and the LM head (split over its T ranks as TpCpuModelRunner splits them), its own
// paged KV cache, and runs its own sequences; the MoE layers run across all D * T ranks as expert
// parallelism (rank g holds experts [g * E / (D * T), ...) whole; model/tp_moe.h), so a token's
// row travels only to the ranks holding its experts and back (all_to_all_v).
//
// KV capacity: each replica's cache holds num_blocks blocks (the per-rank budget), and the runner
// reports dp_size KV cache replicas (kv_cache_replicas()), so the engine plans dp_size * num_blocks
// block ids in one pool per replica and picks each new sequence's replica when it gives it blocks
// (engine/scheduler.h: the pool caching its prefix, else the least busy with room): D replicas
// hold D times the sequences one does, and preemption and prefix caching work per replica.
// Each step the engine thread cuts the StepPlan into one plan per replica (dp_split.h: a
// sequence runs where its blocks are); every rank reads its replica's plan,
// so the ranks agree on the step's shape with no exchange at all, and a replica with nothing to
// run this step goes through the MoE layers with zero rows (TpDenseModel::idle_forward) to serve
// the others' tokens. The logits rows come back in the step's order and are sampled on the
// engine thread as the CPU runner samples them, draft rows included: speculative decoding
// verifies here as on one runner. Hidden states (StepPlan::return_hidden_states, MTP drafting)
// come from each replica's TP rank 0 (its ranks hold the whole residual stream of its tokens),
// put back in the step's token order.
// At destruction it reports on stderr how many sequences each replica started (and, on a decode
// server, how many imported prompt tokens each replica received).
// A rank that fails aborts every group (dist::CpuProcessGroups::abort), so the step throws its
// error instead of leaving the other ranks waiting in the MoE layers' collectives.
// Tests: tests/unit/test_dp_families.cpp; drafts and hidden states in tests/unit/test_engine_mtp.cpp
// and tests/unit/test_engine_draft_model.cpp.
#pragma once

#include <memory>
#include <vector>

#include "tachyon/dist/cpu_process_groups.h"
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/runner/dp_split.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/paged_attention_backend.h"
#include "tachyon/runner/pooled_kv_rows.h"
#include "tachyon/model/tp_shard_loader.h"
#include "tachyon/runner/rank_workers.h"

namespace tachyon::runner {

// Where global rank g of dp_size replicas of tp_size ranks sits: TP rank g % tp_size of its replica
// (TP innermost, dist::RankLayout), the routed experts of expert-parallel rank g of all the ranks.
std::vector<model::ShardPlace> dp_shard_places(int dp_size, int tp_size);

class DpCpuModelRunner : public SynchronousModelRunner {
 public:
  // `full` (f32; FP8 weights come dequantized, as every CPU runner holds them) over dp_size >= 2
  // replicas of tp_size ranks (model::check_dp_size first), each replica's cache num_blocks blocks,
  // in FP8 (E4M3 rows with their factors, paged_attention_backend.h) when fp8_kv_cache.
  DpCpuModelRunner(const model::ModelWeights& full, int dp_size, int tp_size, int32_t num_blocks, int32_t block_size,
                   bool fp8_kv_cache = false);
  // The ranks' shards already cut, in global rank order (dp_shard_places; tp_shard_loader.h's
  // load_f32_shards reads them layer by layer, never holding the whole model beside them).
  DpCpuModelRunner(std::vector<model::TpShard> shards, const model::ModelConfig& config, int dp_size, int tp_size,
                   int32_t num_blocks, int32_t block_size, bool fp8_kv_cache = false);
  ~DpCpuModelRunner() override;
  DpCpuModelRunner(const DpCpuModelRunner&) = delete;
  DpCpuModelRunner& operator=(const DpCpuModelRunner&) = delete;

  int64_t vocab_size() const override { return vocab_size_; }
  bool verifies_drafts() const override { return true; }
  int32_t kv_cache_replicas() const override { return placement_.size(); }
  // Prefill/decode disaggregation: a sequence's blocks lie in its replica's pool, so its rows are
  // that replica's ranks' rows (pooled_kv_rows.h over tp_kv_rows.h).
  KvRowAccess* kv_rows() override { return kv_rows_.get(); }
  int32_t kv_blocks_per_replica() const { return ranks_.front()->cache.num_blocks; }
  int dp_size() const { return placement_.size(); }
  const DpPlacement& placement() const { return placement_; }
  // Test hook: global rank `rank` fails outside any collective in the next step
  // (RankWorkers::fail_next_run_for_test); the step then throws on the engine thread.
  void fail_next_step_for_test(int rank) { workers_.fail_next_run_for_test(rank); }

 protected:
  core::StepOutput run(const core::StepPlan& plan) override;

 private:
  std::vector<float> gather_hidden_states(const DpStep& step) const;

  struct Rank {
    Rank(dist::ProcessGroups groups, model::TpShard shard, int32_t num_blocks, int32_t block_size, bool fp8_kv_cache);
    dist::ProcessGroups groups;  // tp: the replica's ranks; ep: every rank (the experts' group)
    model::TpDenseModel model;
    PagedKvCache cache;
    std::vector<float> logits;  // the last step's logits of the replica's rows
    std::vector<float> hidden;  // TP rank 0, when the plan asks: [replica's tokens, hidden] of the last step
  };

  int64_t vocab_size_;
  int tp_size_;
  dist::CpuProcessGroups process_groups_;
  std::vector<std::unique_ptr<Rank>> ranks_;  // [dp * tp], rank d * tp + t
  DpPlacement placement_;
  std::unique_ptr<PooledKvRowAccess> kv_rows_;  // see kv_rows()
  RankWorkers workers_;  // last: its threads stop before the ranks they use are destroyed
};

}  // namespace tachyon::runner
