// TpCudaModelRunner: tensor parallelism over GPUs (--tp N --device cuda), the process model of
// DESIGN: one process per node, one worker thread per local rank (RankWorkers), local rank i on
// layout.devices[i]. Each worker selects its device, joins the TP group through `make_comm`
// (with its global rank), and builds a CudaModelRunner over its shard (model::shard_weights)
// with that communicator. Every rank samples the same gathered logits with the same seeds, so
// they agree; global rank 0's tokens are the step's.
//
// One node: the engine thread hands each StepPlan to all workers.
// Several nodes (--nnodes): node 0 (the leader) runs the engine; before each step its global
// rank 0 broadcasts the plan's forward fields (plan_wire.h) over the TP group, and the other
// nodes' processes, looping in follow(), decode and run it. An empty broadcast (the leader's
// destructor) ends follow(). At start-up the ranks exchange their plan hashes (every node must
// run the same options) and KV block counts (the group uses the smallest).
//
// The communicator (default_tp_comm_factory): on one node with peer access, the peer-access
// communicator (dist/cuda/peer_communicator.h) for small all-reduces and gathers over NCCL for
// the rest; NCCL alone otherwise, which also runs a group of one (tp 1 through this same path
// on a one-GPU machine); across nodes, NCCL bootstrapped at --master-addr:--master-port
// (multi_node_tp_comm_factory). One GPU per rank: ranks sharing a GPU could deadlock a peer
// collective, and NCCL refuses them. The exception is for tests on a one-GPU machine:
// shared_gpu_tp_comms, whose ranks meet on the host (dist/cuda/host_staged_communicator.h), lets
// every rank sit on one GPU, eagerly and with a fixed KV size per rank (TpCudaLayout::ranks_share_gpu).
// Decode context parallelism (--dcp N = --tp N, latent attention, one node): every rank caches
// only its tokens of the latent cache and attends as model/gpu/latent_attention.h says.
// Expert parallelism (--enable-expert-parallel): rank r holds experts [r*E/N, (r+1)*E/N) whole
// and rank 0 the shared expert's share; the MoE seam stays one all-reduce (model/gpu/moe_mlp.h).
// Tests: tests/gpu/test_tp_cuda_runner.cpp, scripts/gpu-tp-test.sh. Docs: docs/parallelism.md.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "tachyon/dist/communicator.h"
#include "tachyon/core/engine_config.h"
#include "tachyon/model/fp8_tp_shard.h"
#include "tachyon/model/model_weights.h"
#include "tachyon/runner/cuda/cuda_model_runner.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/rank_workers.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::runner {

// Builds global rank r's TP communicator; called on that rank's worker thread with its device
// current, by all local ranks at once (NCCL's join blocks until the whole group has arrived).
using TpCommFactory = std::function<std::unique_ptr<dist::Communicator>(int global_rank)>;

// NCCL over `devices` (distinct GPUs of this node, the whole group), fronted by the peer-access
// communicator when every pair of them has peer access; throws when this build has no NCCL.
TpCommFactory default_tp_comm_factory(const std::vector<int>& devices);
// NCCL for a group of tp_size ranks spread over processes or nodes, bootstrapped at addr:port
// (global rank 0 must run on that host).
TpCommFactory multi_node_tp_comm_factory(const std::string& addr, int port, int tp_size);

// A group of tp_size ranks on one GPU, for tests: the host-staged communicator, and the handler
// that wakes the ranks waiting in one of its collectives when a rank fails outside them.
struct SharedGpuTpComms {
  TpCommFactory make_comm;
  RankFailureHandler on_failure;
};
SharedGpuTpComms shared_gpu_tp_comms(int tp_size);

// Where this process's ranks sit in the TP group.
struct TpCudaLayout {
  std::vector<int> devices;  // this node's GPUs, one per local rank, distinct unless ranks_share_gpu
  int first_rank = 0;        // global rank of devices[0]; ranks are consecutive
  int tp_size = 0;           // ranks in the whole group (0: devices.size(), a one-node group)
  // devices may repeat (tests): only with shared_gpu_tp_comms, enforce_eager (its collectives wait
  // on the host, which a captured graph cannot) and kv_cache_memory_bytes set (ranks that size
  // their caches from one GPU's free memory at once would each count the others' as theirs).
  bool ranks_share_gpu = false;
};

class TpCudaModelRunner : public SynchronousModelRunner {
 public:
  // tp = layout.tp_size (checked with model::check_tp_size). Each rank sizes its KV cache from
  // its GPU's memory; num_blocks() is the group's smallest. make_comm is kept for the runner's
  // life (state it captures, such as a PeerWorld, lives with it). on_failure, when given, wakes the
  // ranks waiting in a collective after one rank failed outside it (RankWorkers).
  TpCudaModelRunner(const model::Bf16ModelWeights& full, const core::EngineConfig& config, TpCudaLayout layout,
                    TpCommFactory make_comm, RankFailureHandler on_failure = {});
  // The same group from the local ranks' shards, cut already (model/tp_shard_loader.h reads them
  // layer by layer, so the whole model is never on the host beside them): one per local rank, in
  // rank order; full_config is the whole model's. Consumed as each rank's runner uploads its own.
  // Fp8TpShard: an FP8 run's weights (model/fp8_projections.h, model/fp8_tp_shard.h).
  TpCudaModelRunner(std::vector<model::Bf16TpShard> shards, const model::ModelConfig& full_config,
                    const core::EngineConfig& config, TpCudaLayout layout, TpCommFactory make_comm,
                    RankFailureHandler on_failure = {});
  TpCudaModelRunner(std::vector<model::Fp8TpShard> shards, const model::ModelConfig& full_config,
                    const core::EngineConfig& config, TpCudaLayout layout, TpCommFactory make_comm,
                    RankFailureHandler on_failure = {});
  // The same from the local ranks' weights already on their GPUs (model/gpu/stream_gpu_weights.h
  // streams them there a layer at a time), one per local rank in rank order, each on
  // layout.devices[i]; moved into the ranks' runners.
  TpCudaModelRunner(std::vector<model::gpu::CudaDenseWeights> weights, const model::ModelConfig& full_config,
                    const core::EngineConfig& config, TpCudaLayout layout, TpCommFactory make_comm,
                    RankFailureHandler on_failure = {});
  ~TpCudaModelRunner() override;
  TpCudaModelRunner(const TpCudaModelRunner&) = delete;
  TpCudaModelRunner& operator=(const TpCudaModelRunner&) = delete;

  // On the leader (global rank 0 here): one engine step on every rank of the group.
  int64_t vocab_size() const override { return vocab_size_; }
  double last_step_device_ms() const override;

  // On a follower node: runs the leader's steps until the leader's runner is destroyed.
  void follow();

  int tp_size() const { return tp_size_; }
  bool is_leader() const { return layout_.first_rank == 0; }
  int32_t num_blocks() const { return num_blocks_; }
  // Tests: local rank r's runner (its last_logits(), graph_replays()). Read it between steps only.
  const CudaModelRunner& rank_runner(int rank) const { return *ranks_[static_cast<size_t>(rank)].runner; }

 public:
  // On one node every rank verifies the step's drafts from the same gathered logits, so they
  // accept alike (tests/gpu/test_cuda_speculative.cpp, ranks sharing a GPU; with decode context
  // parallelism too, the verify rows masked by global position). Across nodes drafts do not
  // travel with the broadcast plan (plan_wire.h): refused (DESIGN.md rule 8).
  bool verifies_drafts() const override { return !multi_node(); }

 protected:
  // Every rank runs the step (CudaModelRunner::launch + wait on its worker thread); rank 0's
  // tokens are the step's output.
  core::StepOutput run(const core::StepPlan& plan) override;

 private:
  // Global rank `global`'s runner over this run's weights, `part` holding its communicator: the
  // whole model when tp_size is 1, its shard otherwise (with expert_parallel, its experts).
  using RankRunnerFactory =
      std::function<std::unique_ptr<CudaModelRunner>(int global, int tp_size, bool expert_parallel, CudaTpRank part)>;
  TpCudaModelRunner(const model::ModelConfig& full_config, const RankRunnerFactory& make_runner,
                    const core::EngineConfig& config, TpCudaLayout layout, TpCommFactory make_comm,
                    RankFailureHandler on_failure);

  struct Rank {
    std::unique_ptr<dist::Communicator> comm;
    std::unique_ptr<CudaModelRunner> runner;
    core::StepOutput output;  // the last step's, with its accepted drafts
    // Multi-node plan broadcast: a stream, the device receive buffer ([8-byte length | plan]) and
    // its host copy.
    cudaStream_t stream = nullptr;
    cuda::DeviceBuffer plan_device;
    cuda::PinnedBuffer plan_host;
  };
  bool multi_node() const { return tp_size_ > static_cast<int>(layout_.devices.size()); }
  // Global rank 0 sends `plan` (nullptr: the stop signal); every rank receives. Returns the
  // decoded plan on followers, nullopt for the stop signal (and always on the leader).
  std::optional<core::StepPlan> broadcast_plan(const core::StepPlan* plan);
  void agree_on_start_up(const core::EngineConfig& config);

  int64_t vocab_size_;
  TpCudaLayout layout_;
  int tp_size_;
  TpCommFactory make_comm_;
  int32_t num_blocks_ = 0;
  size_t plan_capacity_ = 0;
  std::vector<Rank> ranks_;
  RankWorkers workers_;  // last: its threads stop before the ranks they use are destroyed
};

}  // namespace tachyon::runner
