// PcpCpuModelRunner: prefill context parallelism on CPU thread ranks
// (--prefill-context-parallel-size N / --pcp N, docs/parallelism.md). N ranks, each a worker
// thread (RankWorkers) with its own whole PagedKvCache and CpuCommunicator; they share one
// read-only DenseModel (the forward is const, as the DCP tests already share one over threads).
//
// A step with a row count above one in some sequence (a prefill chunk) is split by
// build_pcp_plan (runner/pcp_plan.h, dual-chunk): each rank runs the forward of its own rows
// only (embedding, projections, MLP/MoE, LM head), attention gathers the layer's rows once per
// layer (pcp_attention_backend.h) so every rank's cache holds the whole step, and after the LM
// head one all_gatherv of the logits rows puts them back in the plan's order, rank 0 sampling
// as the one-rank runner does. The rows are re-ordered after the LM head rather than before it:
// a rank's LM head then runs on its own logits rows only, and only those rows (one per prompt
// that ends in the chunk) travel, not every row's hidden state.
// A step of one row per sequence (decode) runs replicated: every rank runs the whole plan on its
// own cache with no collective, and rank 0's logits are sampled.
// Tests: tests/unit/test_pcp_families.cpp.
#pragma once

#include <memory>
#include <vector>

#include "tachyon/dist/counting_communicator.h"
#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/paged_attention_backend.h"
#include "tachyon/runner/rank_workers.h"

namespace tachyon::runner {

// One PCP rank's step: rank group.rank()'s rows of `plan` through `model` over `cache` (whole),
// returning the logits of every plan.logits_rows row in plan order. Split steps make one
// all_gatherv per layer and one for the logits; unsplit steps none.
std::vector<float> run_pcp_rank_step(const model::DenseModel& model, PagedKvCache& cache, const core::StepPlan& plan,
                                     dist::Communicator& group);

class PcpCpuModelRunner : public SynchronousModelRunner {
 public:
  PcpCpuModelRunner(model::ModelWeights weights, int pcp_size, int32_t num_blocks, int32_t block_size);
  ~PcpCpuModelRunner() override;
  PcpCpuModelRunner(const PcpCpuModelRunner&) = delete;
  PcpCpuModelRunner& operator=(const PcpCpuModelRunner&) = delete;

  int64_t vocab_size() const override { return model_.config().vocab_size; }
  int pcp_size() const { return world_.size(); }
  // Rank r's collectives of the last step (dist::CountingCommunicator).
  const dist::CollectiveCounts& rank_counts(int rank) const { return ranks_[static_cast<size_t>(rank)]->comm.counts(); }

 protected:
  core::StepOutput run(const core::StepPlan& plan) override;

 private:
  struct Rank {
    Rank(dist::CpuWorld& world, int rank, const model::ModelConfig& config, int32_t num_blocks, int32_t block_size)
        : inner(world, rank), comm(inner), cache(config, num_blocks, block_size) {}
    dist::CpuCommunicator inner;
    dist::CountingCommunicator comm;
    PagedKvCache cache;
    std::vector<float> logits;
  };

  model::DenseModel model_;
  dist::CpuWorld world_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  RankWorkers workers_;  // last: its threads stop before the ranks they use are destroyed
};

}  // namespace tachyon::runner
