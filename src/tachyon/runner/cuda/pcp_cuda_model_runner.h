// PcpCudaModelRunner: prefill context parallelism on GPUs (--pcp N at --tp 1): N whole-model
// ranks, one worker thread each (RankWorkers), rank r on layout.devices[r], each a CudaModelRunner
// with its own KV cache holding every token, joined into the PCP group through `make_comm`.
//
// A step whose rows build_pcp_plan splits (runner/pcp_plan.h: a prefill chunk, dual-chunk
// pieces r and 2N-1-r per rank): every rank runs only its rows (embedding, projections, MLP, LM
// head), and each latent-attention layer makes ONE grouped all_gatherv of the rows' kv_a (and wk
// on a full DSA indexer layer) so that every rank stores the whole step and its queries attend
// the full context (model/gpu/latent_attention.h). The positions and slots of the gathered rows
// come from the plan on the host, with the step's one upload; nothing is read back. Each rank
// samples its own logits rows (a sampled piece carries its sequence's sampling inputs), so the
// logits never travel: a split step makes exactly one collective per layer, and the sampled
// sequences come back in plan order from the ranks that hold them.
// A step that is not split (decodes) runs whole on every rank, on its own cache, with no
// collective; rank 0's tokens are the step's.
// Eager, latent-attention models, no speculation, one node. The ranks may share one GPU
// (TpCudaLayout::ranks_share_gpu, with shared_gpu_tp_comms: the tests' harness).
// Tests: tests/gpu/test_pcp_cuda_runner.cpp. Docs: docs/parallelism.md.
#pragma once

#include <memory>
#include <vector>

#include "tachyon/core/engine_config.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/runner/cuda/cuda_model_runner.h"
#include "tachyon/runner/cuda/tp_cuda_model_runner.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/rank_workers.h"

namespace tachyon::runner {

class PcpCudaModelRunner : public SynchronousModelRunner {
 public:
  // config.device.prefill_context_parallel_size ranks on layout.devices (checked), whose
  // communicators make_comm builds (global rank r = local rank r).
  PcpCudaModelRunner(const model::Bf16ModelWeights& weights, const core::EngineConfig& config, TpCudaLayout layout,
                     TpCommFactory make_comm, RankFailureHandler on_failure = {});
  ~PcpCudaModelRunner() override;
  PcpCudaModelRunner(const PcpCudaModelRunner&) = delete;
  PcpCudaModelRunner& operator=(const PcpCudaModelRunner&) = delete;

  int64_t vocab_size() const override { return vocab_size_; }
  double last_step_device_ms() const override;
  // Drafts' verify rows are not split: speculation is refused.
  bool verifies_drafts() const override { return false; }

  int pcp_size() const { return static_cast<int>(ranks_.size()); }
  int32_t num_blocks() const { return num_blocks_; }
  // Tests: rank r's runner and communicator. Read them between steps only.
  const CudaModelRunner& rank_runner(int rank) const { return *ranks_[static_cast<size_t>(rank)].runner; }
  dist::Communicator& rank_comm(int rank) const { return *ranks_[static_cast<size_t>(rank)].comm; }

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
  int32_t num_blocks_ = 0;
  std::vector<Rank> ranks_;
  RankWorkers workers_;  // last: its threads stop before the ranks they use are destroyed
};

// Why --pcp cannot run on GPUs for this model and config ("" when it can).
std::string cuda_pcp_unsupported_reason(const model::ModelConfig& model, const core::EngineConfig& config);

}  // namespace tachyon::runner
