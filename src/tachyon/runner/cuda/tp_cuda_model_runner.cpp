#include "tachyon/runner/cuda/tp_cuda_model_runner.h"

#include <algorithm>
#include <set>

#include "tachyon/base/check.h"
#include "tachyon/dist/cuda/peer_communicator.h"
#include "tachyon/kernels/cuda/cuda_check.h"
#include "tachyon/model/tp_shard.h"
#ifdef TACHYON_HAVE_NCCL
#include "tachyon/dist/nccl/nccl_process_groups.h"
#endif

namespace tachyon::runner {

TpCommFactory default_tp_comm_factory(const std::vector<int>& devices) {
  TACHYON_CHECK(std::set<int>(devices.begin(), devices.end()).size() == devices.size())
      << "NCCL needs one GPU per tensor-parallel rank";
#ifdef TACHYON_HAVE_NCCL
  dist::ParallelConfig parallel;
  parallel.tp = static_cast<int>(devices.size());
  // The unique ids are generated here, on the constructing thread, before the ranks join.
  auto groups = std::make_shared<dist::NcclProcessGroups>(parallel);
  if (devices.size() == 1 || !dist::PeerWorld::supported(devices)) {
    return [groups](int rank) { return std::move(groups->make(rank).tp); };
  }
  // GPUs that reach each other's memory: small all-reduces and gathers (every decode step's)
  // go over peer memory in one kernel, the rest to NCCL.
  auto world = std::make_shared<dist::PeerWorld>(devices);
  return [groups, world](int rank) -> std::unique_ptr<dist::Communicator> {
    return std::make_unique<dist::PeerCommunicator>(*world, rank, std::move(groups->make(rank).tp));
  };
#else
  TACHYON_FAIL() << "tensor parallelism on GPUs needs NCCL, and this build has none (set NCCL_ROOT and reconfigure)";
  return {};
#endif
}

TpCudaModelRunner::TpCudaModelRunner(const model::Bf16ModelWeights& full, const engine::EngineConfig& config,
                                     std::vector<int> devices, TpCommFactory make_comm)
    : vocab_size_(full.config.vocab_size),
      devices_(std::move(devices)),
      make_comm_(std::move(make_comm)),
      ranks_(devices_.size()),
      workers_(static_cast<int>(devices_.size())) {
  const int tp = static_cast<int>(devices_.size());
  model::check_tp_size(full.config, tp);
  // One GPU per rank: a peer collective waiting for a rank whose kernel queues behind it on the
  // same GPU would never finish, and NCCL refuses such groups anyway.
  TACHYON_CHECK(std::set<int>(devices_.begin(), devices_.end()).size() == devices_.size())
      << "tensor parallelism needs one GPU per rank";
  workers_.run([&](int r) {
    TACHYON_CUDA_CHECK(cudaSetDevice(devices_[static_cast<size_t>(r)]));
    Rank& rank = ranks_[static_cast<size_t>(r)];
    rank.comm = make_comm_(r);
    TACHYON_CHECK(rank.comm->size() == tp && rank.comm->rank() == r)
        << "internal: rank " << r << " joined a group as rank " << rank.comm->rank() << " of " << rank.comm->size();
    CudaTpRank part{.comm = rank.comm.get()};
    if (tp == 1) {  // the whole model: no copy
      rank.runner = std::make_unique<CudaModelRunner>(full, config, part);
      return;
    }
    model::Bf16TpShard shard = model::shard_weights(full, r, tp);
    part.vocab_begin = shard.vocab_begin;
    part.vocab_rows = shard.vocab_rows;
    rank.runner = std::make_unique<CudaModelRunner>(shard.weights, config, part);
  });
  num_blocks_ = ranks_[0].runner->num_blocks();
  for (const Rank& rank : ranks_) num_blocks_ = std::min(num_blocks_, rank.runner->num_blocks());
}

TpCudaModelRunner::~TpCudaModelRunner() {
  // On their own threads: a CUDA runner and an NCCL communicator end where they were made.
  try {
    workers_.run([&](int r) {
      Rank& rank = ranks_[static_cast<size_t>(r)];
      rank.runner.reset();
      rank.comm.reset();
    });
  } catch (...) {
    // A destructor must not throw; a failing teardown leaves nothing for the caller to do.
  }
}

std::vector<engine::SampledToken> TpCudaModelRunner::execute(const engine::StepPlan& plan) {
  if (plan.empty()) return {};
  workers_.run([&](int r) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    rank.sampled = rank.runner->execute(plan);
  });
  return ranks_[0].sampled;
}

double TpCudaModelRunner::last_step_device_ms() const { return ranks_[0].runner->last_step_device_ms(); }

}  // namespace tachyon::runner
