// TpCpuModelRunner: tensor parallelism on CPU thread ranks (--tp N --device cpu). It owns a
// dist::CpuWorld(N) and N worker threads; rank r holds a TpDenseModel of its shard, its own
// PagedKvCache built from the rank's config (its kv heads only; for latent attention the full
// latent, which every head reads, so an MLA model's cache is not divided) and a CpuCommunicator.
// run(plan) hands the same StepPlan to every worker (RankWorkers), each runs its forward
// through a PagedAttentionBackend over its cache, and every rank ends with the full logits;
// rank 0's are sampled on the calling (engine) thread with the CPU runner's sampling
// (sample_plan_rows), so tokens match CpuModelRunner's up to f32 rounding. A worker's exception
// is rethrown on the engine thread; a rank that fails aborts the TP and DCP worlds, so its peers
// stop waiting for it (RankWorkers). A plan asking for hidden states (StepPlan::
// return_hidden_states, MTP drafting) gets rank 0's (every rank holds the whole residual stream),
// with or without two-batch overlap or decode context parallelism.
// With decode context parallelism (dcp.size > 1, dcp_attention_backend.h) each DCP group of
// dcp.size consecutive ranks splits the latent cache by token: a rank's cache holds
// num_blocks * block_size / dcp.size rows (rank_cache) and its attention goes through a
// DcpAttentionBackend over the group's own communicator.
// With two-batch overlap (TboOptions::enabled, --tbo; expert-parallel MoE models) a step of two or
// more sequences runs as two micro-batches per rank whose collectives overlap the other's compute
// (tbo_rank_step.h); a step of one sequence runs as one batch.
// Tests: tests/unit/test_tp_engine.cpp, test_tp_families.cpp (MoE, MLA, DSA; TP and EP).
#pragma once

#include <memory>
#include <vector>

#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/model/dcp_layout.h"
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/paged_attention_backend.h"
#include "tachyon/runner/rank_workers.h"
#include "tachyon/runner/tbo_rank_step.h"

namespace tachyon::runner {

class TpCpuModelRunner : public SynchronousModelRunner {
 public:
  // Shards `full` (f32) over tp_size >= 2 ranks (checked with model::check_tp_size first), a MoE
  // model's experts whole over the ranks when expert_parallel (--enable-expert-parallel). With
  // fp8_kv_cache every rank's cache holds FP8 rows (paged_attention_backend.h); its factors are
  // per KV head (or per latent row), so a rank's rows are the single-rank cache's rows of its heads.
  TpCpuModelRunner(const model::ModelWeights& full, int tp_size, int32_t num_blocks, int32_t block_size,
                   bool expert_parallel = false, bool fp8_kv_cache = false, model::DcpOptions dcp = {},
                   TboOptions tbo = {});
  // The group's shards already cut, one per rank in rank order (tp_shard_loader.h's
  // load_f32_tp_shards reads them layer by layer: the whole model is never held beside them).
  TpCpuModelRunner(std::vector<model::TpShard> shards, const model::ModelConfig& config, int32_t num_blocks,
                   int32_t block_size, bool expert_parallel = false, bool fp8_kv_cache = false,
                   model::DcpOptions dcp = {}, TboOptions tbo = {});
  ~TpCpuModelRunner() override;
  TpCpuModelRunner(const TpCpuModelRunner&) = delete;
  TpCpuModelRunner& operator=(const TpCpuModelRunner&) = delete;

  int64_t vocab_size() const override { return vocab_size_; }
  // Prefill/decode disaggregation: the ranks' rows as one rank of the whole model caches them
  // (tp_kv_rows.h: latent rows read from rank 0, K/V heads joined over the ranks, or under DCP
  // tokens joined over the ranks).
  KvRowAccess* kv_rows() override { return kv_rows_.get(); }
  int tp_size() const { return world_.size(); }
  bool two_batch_overlap() const { return tbo_.enabled; }
  // Rank r's own KV cache (its block count and rows: what DCP divides).
  const PagedKvCache& rank_cache(int rank) const { return ranks_[static_cast<size_t>(rank)]->cache; }
  // Rank r's full logits of the last step [its logits rows, vocab] (what rank 0 samples from).
  const std::vector<float>& rank_logits(int rank) const { return ranks_[static_cast<size_t>(rank)]->logits; }
  // Test hook: global rank `rank` fails outside any collective in the next step
  // (RankWorkers::fail_next_run_for_test); the step then throws on the engine thread.
  void fail_next_step_for_test(int rank) { workers_.fail_next_run_for_test(rank); }

 protected:
  core::StepOutput run(const core::StepPlan& plan) override;

 private:
  void abort_worlds(const std::string& reason);  // RankWorkers' on_failure

  struct Rank {
    Rank(dist::CpuWorld& world, int rank, model::TpShard shard, int32_t num_blocks, int32_t block_size,
         bool fp8_kv_cache, dist::CpuWorld* dcp_world, int dcp_rank);
    dist::CpuCommunicator comm;
    std::unique_ptr<dist::CpuCommunicator> dcp_comm;  // its DCP group's; null without DCP
    model::TpDenseModel model;
    PagedKvCache cache;
    std::vector<float> logits;  // the last step's full logits
  };

  int64_t vocab_size_;
  dist::CpuWorld world_;
  model::DcpOptions dcp_;
  TboOptions tbo_;
  std::vector<std::unique_ptr<dist::CpuWorld>> dcp_worlds_;  // one per DCP group; before ranks_, which use them
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::unique_ptr<KvRowAccess> kv_rows_;  // see kv_rows()
  RankWorkers workers_;  // last: its threads stop before the ranks they use are destroyed
};

}  // namespace tachyon::runner
