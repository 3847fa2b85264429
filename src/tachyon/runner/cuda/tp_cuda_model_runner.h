// TpCudaModelRunner: tensor parallelism over the GPUs of this node (--tp N --device cuda), the
// process model of DESIGN: one process, one worker thread per rank (RankWorkers), rank r on
// devices[r]. Each worker selects its device, joins the TP group through `make_comm`, and builds
// a CudaModelRunner over its shard (model::shard_weights) with that communicator; the engine
// thread hands every step's StepPlan to all workers, and rank 0's sampled tokens are the step's
// (every rank samples the same gathered logits with the same seeds, so they agree).
// The communicator (default_tp_comm_factory): on distinct GPUs with peer access, the peer-access
// communicator (dist/cuda/peer_communicator.h) for small all-reduces and gathers over NCCL for
// the rest; NCCL alone otherwise, which also runs a group of one (tp 1 through this same path
// on a one-GPU machine). One GPU per rank: ranks sharing a GPU could deadlock a peer collective.
// Tests: tests/gpu/test_tp_cuda_runner.cpp. Docs: docs/parallelism.md.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tachyon/dist/communicator.h"
#include "tachyon/engine/engine_config.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/runner/cuda/cuda_model_runner.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/rank_workers.h"

namespace tachyon::runner {

// Builds rank r's TP communicator; called on rank r's worker thread with its device current,
// by all ranks at once (NCCL's join blocks until the whole group has arrived).
using TpCommFactory = std::function<std::unique_ptr<dist::Communicator>(int rank)>;

// NCCL over `devices` (distinct GPUs of this node), fronted by the peer-access communicator when
// every pair of them has peer access; throws when this build has no NCCL.
TpCommFactory default_tp_comm_factory(const std::vector<int>& devices);

class TpCudaModelRunner : public ModelRunner {
 public:
  // devices[r]: rank r's GPU, all distinct; tp = devices.size() (checked with
  // model::check_tp_size). Each rank sizes its KV cache from its GPU's memory; num_blocks() is
  // the smallest.
  // make_comm is kept for the runner's life (state it captures, such as a PeerWorld, with it).
  TpCudaModelRunner(const model::Bf16ModelWeights& full, const engine::EngineConfig& config, std::vector<int> devices,
                    TpCommFactory make_comm);
  ~TpCudaModelRunner() override;
  TpCudaModelRunner(const TpCudaModelRunner&) = delete;
  TpCudaModelRunner& operator=(const TpCudaModelRunner&) = delete;

  std::vector<engine::SampledToken> execute(const engine::StepPlan& plan) override;
  int64_t vocab_size() const override { return vocab_size_; }
  double last_step_device_ms() const override;

  int tp_size() const { return workers_.size(); }
  int32_t num_blocks() const { return num_blocks_; }
  // Tests: rank r's runner (its last_logits(), graph_replays()). Read it between steps only.
  const CudaModelRunner& rank_runner(int rank) const { return *ranks_[static_cast<size_t>(rank)].runner; }

 private:
  struct Rank {
    std::unique_ptr<dist::Communicator> comm;
    std::unique_ptr<CudaModelRunner> runner;
    std::vector<engine::SampledToken> sampled;
  };

  int64_t vocab_size_;
  std::vector<int> devices_;
  TpCommFactory make_comm_;
  int32_t num_blocks_ = 0;
  std::vector<Rank> ranks_;
  RankWorkers workers_;  // last: its threads stop before the ranks they use are destroyed
};

}  // namespace tachyon::runner
