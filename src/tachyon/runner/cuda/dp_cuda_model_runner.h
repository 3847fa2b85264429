// DpCudaModelRunner: data-parallel attention on GPUs (--dp D at --tp 1), for MoE models. D
// whole-model ranks, one worker thread each (RankWorkers), rank d on layout.devices[d], each a
// CudaModelRunner with its own paged KV cache and its own sequences, holding the attention, the
// dense layers, the embedding, the LM head and the shared expert whole, and the routed experts
// [d * E / D, (d + 1) * E / D) (model::shard_weights with ep = D), joined into the expert group
// through `make_comm`.
//
// KV capacity and placement are the CPU runner's (dp_cpu_model_runner.h, dp_split.h): each rank's
// cache holds num_blocks() blocks, the runner reports D KV cache replicas, and each step's plan is
// cut by the pool of each sequence's blocks. Every rank launches its own part; its MoE layers serve
// every rank's rows together (model/gpu/moe_mlp.h: an all_gatherv of the MLP inputs, this rank's
// experts over all of them, one all-reduce), each rank knowing every rank's row count from the cut
// plan, so nothing is exchanged before the step. A rank with no sequence this step serves the
// others' rows with its experts (CudaModelRunner::serve_experts). Each rank samples its own
// sequences; their tokens come back in the step's order.
// Eager (the MoE layers' shapes depend on the other ranks' steps), one node, bf16 cache, no
// speculation, no prefill/decode transfer. The ranks may share one GPU
// (TpCudaLayout::ranks_share_gpu with shared_gpu_tp_comms: the tests' harness).
// Tests: tests/gpu/test_dp_cuda_runner.cpp. Docs: docs/parallelism.md.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tachyon/core/engine_config.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/runner/cuda/cuda_model_runner.h"
#include "tachyon/runner/cuda/tp_cuda_model_runner.h"
#include "tachyon/runner/dp_split.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/rank_workers.h"

namespace tachyon::runner {

class DpCudaModelRunner : public SynchronousModelRunner {
 public:
  // config.device.data_parallel_size ranks on layout.devices (checked with
  // cuda_dp_unsupported_reason), whose communicators make_comm builds (rank d = local rank d).
  DpCudaModelRunner(const model::Bf16ModelWeights& weights, const core::EngineConfig& config, TpCudaLayout layout,
                    TpCommFactory make_comm, RankFailureHandler on_failure = {});
  ~DpCudaModelRunner() override;
  DpCudaModelRunner(const DpCudaModelRunner&) = delete;
  DpCudaModelRunner& operator=(const DpCudaModelRunner&) = delete;

  int64_t vocab_size() const override { return vocab_size_; }
  double last_step_device_ms() const override;
  bool verifies_drafts() const override { return false; }
  int32_t kv_cache_replicas() const override { return placement_.size(); }

  int dp_size() const { return placement_.size(); }
  // Blocks of each rank's cache (the engine plans dp_size() times as many).
  int32_t num_blocks() const { return placement_.blocks_per_replica(); }
  const DpPlacement& placement() const { return placement_; }
  // Tests: the f32 logits [rows, vocab] of the last step's first `rows` logits rows, in the
  // step's order (each from the rank that ran its sequence).
  std::vector<float> last_logits(int32_t rows) const;
  // Tests: rank d's runner. Read it between steps only.
  const CudaModelRunner& rank_runner(int rank) const { return *ranks_[static_cast<size_t>(rank)].runner; }

 protected:
  core::StepOutput run(const core::StepPlan& plan) override;

 private:
  struct Rank {
    std::unique_ptr<dist::Communicator> comm;
    std::unique_ptr<CudaModelRunner> runner;
    core::StepOutput output;
  };

  int64_t vocab_size_;
  TpCommFactory make_comm_;
  DpPlacement placement_;
  std::vector<std::pair<int, int64_t>> last_rows_;  // the last step's logits rows: (rank, row there)
  std::vector<Rank> ranks_;
  RankWorkers workers_;  // last: its threads stop before the ranks they use are destroyed
};

// Why --dp cannot run on GPUs for this model and config ("" when it can).
std::string cuda_dp_unsupported_reason(const model::ModelConfig& model, const core::EngineConfig& config);

}  // namespace tachyon::runner
