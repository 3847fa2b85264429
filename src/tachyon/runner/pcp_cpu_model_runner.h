// PcpCpuModelRunner: prefill context parallelism on CPU thread ranks
// (--prefill-context-parallel-size N / --pcp N, docs/parallelism.md), optionally over tensor
// parallel ranks (--tp T --pcp N: T x N ranks). Each rank is a worker thread (RankWorkers) with
// its own PagedKvCache holding every token of the step and its communicators. At --tp 1 the N
// ranks share one read-only DenseModel (the forward is const, as the DCP tests already share one
// over threads); at --tp T each rank holds its TpDenseModel shard (model/tp_shard.h).
//
// Rank layout (dist::RankLayout of ParallelConfig{tp = T, pcp = N}, as vLLM and SGLang lay them
// out): tp is the fastest index, global rank = pcp_rank * T + tp_rank. So a TP group is T
// consecutive ranks (one PCP rank's model, the fastest links) and a PCP group is the N ranks of
// one tp_rank, stride T: the grouped gather of a layer runs among ranks holding the same heads.
//
// A step with a row count above one in some sequence (a prefill chunk) is split by
// build_pcp_plan (runner/pcp_plan.h, dual-chunk): the T ranks of PCP rank p all run p's rows
// (embedding, projections, MLP/MoE, LM head; their TP collectives carry those rows only),
// attention gathers the layer's rows once per layer within the PCP group
// (pcp_attention_backend.h; under TP each rank gathers its own shard's rows: an MLA latent is
// whole on every TP rank, so the same latent rows), and after the LM head one all_gatherv of the
// logits rows puts them back in the plan's order, global rank 0 sampling as the one-rank runner
// does. The rows are re-ordered after the LM head rather than before it: a rank's LM head then
// runs on its own logits rows only, and only those rows (one per prompt that ends in the chunk)
// travel, not every row's hidden state.
// A step of one row per sequence (decode) runs replicated over the PCP groups: every TP group
// runs the whole plan on its own cache with no PCP collective, and rank 0's logits are sampled.
// With decode context parallelism (--dcp D, dividing T) each TP group's cache is split by token
// over its DCP groups of D consecutive ranks, as TpCpuModelRunner splits it; PCP writes that
// layout directly (pcp_attention_backend.h) and attention runs through DcpAttentionBackend.
// A rank that fails aborts every group (dist::CpuProcessGroups::abort), so its peers stop waiting.
// Tests: tests/unit/test_pcp_families.cpp, test_pcp_tp.cpp (--tp x --pcp).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tachyon/dist/counting_communicator.h"
#include "tachyon/dist/cpu_process_groups.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/model/dcp_layout.h"
#include "tachyon/runner/paged_attention_backend.h"
#include "tachyon/runner/pcp_attention_backend.h"
#include "tachyon/runner/rank_workers.h"

namespace tachyon::runner {

// A rank's forward: the whole DenseModel's, or a TP rank's TpDenseModel's (its TP collectives
// inside), with the model's hook (its "final_hidden": the rows' last hidden states).
using PcpRankForward = std::function<std::vector<float>(const model::ForwardBatch&, model::AttentionBackend&,
                                                        const model::ForwardHook&)>;

// One PCP rank's step: rank group.rank()'s rows of `plan` through `forward` (of a model whose
// config, the rank's, is `config`) over `cache` (every token), returning the logits of every
// plan.logits_rows row in plan order. `group` is the PCP group. Split steps make one all_gatherv
// per layer and one for the logits on it; unsplit steps none. With `dcp` the cache holds the
// rank's DCP share (pcp_attention_backend.h) and attention runs through the DCP group. With
// `hidden` (every rank of the group or none), also every plan token's last hidden state before
// the final norm, [plan tokens, hidden] in plan order: a split step gathers the ranks' rows in one
// more all_gatherv (MTP drafting reads them).
std::vector<float> run_pcp_rank_step(const model::ModelConfig& config, const PcpRankForward& forward,
                                     PagedKvCache& cache, const core::StepPlan& plan, dist::Communicator& group,
                                     PcpDcp dcp = {}, std::vector<float>* hidden = nullptr);
// The same for a whole model (--tp 1).
std::vector<float> run_pcp_rank_step(const model::DenseModel& model, PagedKvCache& cache, const core::StepPlan& plan,
                                     dist::Communicator& group, std::vector<float>* hidden = nullptr);

class PcpCpuModelRunner : public SynchronousModelRunner {
 public:
  // tp_size > 1 shards `weights` over each PCP rank's TP group (model::check_tp_size first);
  // dcp.size > 1 (dividing tp_size) splits each rank's cache by token over its DCP group, dcp.size
  // consecutive ranks of its TP group: a cache of num_blocks blocks of block_size / dcp.size rows.
  // fp8_kv_cache: every rank's cache holds the rows an FP8 cache would (paged_attention_backend.h),
  // the gathered rows of a split step stored as the unsplit step would store them.
  PcpCpuModelRunner(model::ModelWeights weights, int pcp_size, int32_t num_blocks, int32_t block_size,
                    int tp_size = 1, model::DcpOptions dcp = {}, bool fp8_kv_cache = false);
  // The same at --tp shards.size() (>= 2) from the TP ranks' shards, one per TP rank in rank order
  // (model/tp_shard_loader.h reads them a layer at a time, so the whole model is never on the
  // host); full_config is the whole model's. Every PCP group's TP rank t runs shards[t]: the
  // host holds the model once, not once per PCP group.
  PcpCpuModelRunner(std::vector<model::TpShard> shards, const model::ModelConfig& full_config, int pcp_size,
                    int32_t num_blocks, int32_t block_size, model::DcpOptions dcp = {}, bool fp8_kv_cache = false);
  ~PcpCpuModelRunner() override;
  PcpCpuModelRunner(const PcpCpuModelRunner&) = delete;
  PcpCpuModelRunner& operator=(const PcpCpuModelRunner&) = delete;

  int64_t vocab_size() const override { return config_.vocab_size; }
  int pcp_size() const { return groups_.layout().config().pcp; }
  int tp_size() const { return groups_.layout().config().tp; }
  // Global rank r's collectives of the last step on its PCP group (dist::CountingCommunicator).
  const dist::CollectiveCounts& rank_counts(int rank) const { return ranks_[static_cast<size_t>(rank)]->pcp.counts(); }
  // Prefill/decode disaggregation: every TP group holds every token, so the rows are the first
  // group's (tp_kv_rows.h over its ranks) and go to every group (replicated_kv_rows.h).
  KvRowAccess* kv_rows() override { return kv_rows_.get(); }
  // Global rank r's TP shard (null at --tp 1, where the ranks share the whole model): ranks of
  // one TP rank in different PCP groups share it.
  const model::TpShard* rank_shard(int rank) const {
    const auto& shard = ranks_[static_cast<size_t>(rank)]->shard;
    return shard ? &shard->shard() : nullptr;
  }
  // Global rank r's own KV cache (what DCP divides).
  const PagedKvCache& rank_cache(int rank) const { return ranks_[static_cast<size_t>(rank)]->cache; }
  // The same on its TP group (none at --tp 1).
  const dist::CollectiveCounts& rank_tp_counts(int rank) const { return ranks_[static_cast<size_t>(rank)]->tp.counts(); }
  // Test hook: global rank `rank` fails outside any collective in the next step
  // (RankWorkers::fail_next_run_for_test); the step then throws on the engine thread.
  void fail_next_step_for_test(int rank) { workers_.fail_next_run_for_test(rank); }

 protected:
  core::StepOutput run(const core::StepPlan& plan) override;

 private:
  // What the ranks compute with: the whole model (--tp 1, shared by every rank), or one shard per
  // TP rank, each shared by that TP rank of every PCP group.
  struct Weights {
    model::ModelConfig config;  // the whole model's
    std::unique_ptr<model::DenseModel> whole;
    std::vector<std::shared_ptr<const model::TpShard>> shards;
    int tp_size() const { return shards.empty() ? 1 : static_cast<int>(shards.size()); }
    static Weights of(model::ModelWeights&& weights, int tp_size);  // cut once at tp_size > 1
    static Weights of(std::vector<model::TpShard>&& shards, const model::ModelConfig& full_config);
  };
  PcpCpuModelRunner(Weights weights, int pcp_size, int32_t num_blocks, int32_t block_size, model::DcpOptions dcp,
                    bool fp8_kv_cache);

  struct Rank {
    // shard: its TP rank's at --tp > 1; null at --tp 1, where the cache is built from `config`.
    Rank(dist::ProcessGroups process_groups, std::shared_ptr<const model::TpShard> shard,
         const model::ModelConfig& config, int32_t num_blocks, int32_t block_size, bool fp8_kv_cache);
    dist::ProcessGroups groups;
    dist::CountingCommunicator pcp;  // counts groups.pcp's calls
    dist::CountingCommunicator tp;   // counts groups.tp's calls
    std::unique_ptr<model::TpDenseModel> shard;  // this rank's TP shard; null at --tp 1 (the shared whole model)
    PagedKvCache cache;
    std::vector<float> logits;
    std::vector<float> hidden;  // TP rank 0's, when the plan asks: [plan tokens, hidden] of the last step
  };

  model::ModelConfig config_;                  // the whole model's
  model::DcpOptions dcp_;
  std::unique_ptr<model::DenseModel> whole_;   // at --tp 1, shared by the ranks; else null
  dist::CpuProcessGroups groups_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::unique_ptr<KvRowAccess> kv_rows_;  // see kv_rows()
  RankWorkers workers_;  // last: its threads stop before the ranks they use are destroyed
};

}  // namespace tachyon::runner
