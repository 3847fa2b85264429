#include "tachyon/runner/cuda/tp_cuda_model_runner.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <type_traits>

#include "tachyon/base/check.h"
#include "tachyon/dist/cuda/host_staged_communicator.h"
#include "tachyon/dist/cuda/peer_communicator.h"
#include "tachyon/tensor/cuda/cuda_check.h"
#include "tachyon/model/fp8_tp_shard.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/plan_wire.h"
#ifdef TACHYON_HAVE_NCCL
#include "tachyon/dist/nccl/nccl_communicator.h"
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

TpCommFactory multi_node_tp_comm_factory(const std::string& addr, int port, int tp_size) {
#ifdef TACHYON_HAVE_NCCL
  const ncclUniqueId id = dist::nccl_unique_id_at(addr, port);
  return [id, tp_size](int rank) { return std::make_unique<dist::NcclCommunicator>(id, tp_size, rank); };
#else
  TACHYON_FAIL() << "tensor parallelism over nodes needs NCCL, and this build has none (set NCCL_ROOT and reconfigure)";
  return {};
#endif
}

SharedGpuTpComms shared_gpu_tp_comms(int tp_size) {
  auto group = std::make_shared<dist::HostStagedGroup>(tp_size);
  return {[group](int rank) { return group->join(rank); },
          [group](const std::string& reason) { group->abort(reason); }};
}

namespace {

// What every rank tells the others at start-up (multi-node): the options it plans with and the
// KV blocks its GPU holds.
struct StartUpInfo {
  char plan_hash[32];
  int32_t num_blocks;
  int32_t pad;
};

// What every shard type holds: the bf16 tensors and the rank's geometry.
const model::Bf16TpShard& base_of(const model::Bf16TpShard& shard) { return shard; }
const model::Bf16TpShard& base_of(const model::Fp8TpShard& shard) { return shard.base; }

template <typename Layers>
void drop_shared_experts(Layers& layers) {  // a rank that does not add it need not hold it
  for (auto& layer : layers) model::drop_shared_expert(layer);
}

// A rank's place in the group from its shard's geometry: its vocab rows, and under expert
// parallelism its experts and whether it adds the shared expert (rank 0 alone, though every shard
// is cut with it whole).
CudaTpRank rank_part(const model::Bf16TpShard& base, CudaTpRank part) {
  part.vocab_begin = base.vocab_begin;
  part.vocab_rows = base.vocab_rows;
  if (base.expert_parallel) {
    part.expert_begin = static_cast<int32_t>(base.expert_begin);
    part.expert_count = static_cast<int32_t>(base.expert_count);
    part.adds_shared_expert = model::adds_shared_expert(base);
  }
  return part;
}

// Rank `global`'s runner over its shard, consumed.
template <typename Shard>
std::unique_ptr<CudaModelRunner> shard_runner(Shard& shard, const core::EngineConfig& config, CudaTpRank part) {
  const model::Bf16TpShard& base = base_of(shard);
  part = rank_part(base, part);
  const bool drop_shared = !model::adds_shared_expert(base);
  if constexpr (std::is_same_v<Shard, model::Fp8TpShard>) {
    if (drop_shared) {
      drop_shared_experts(shard.base.weights.layers);
      drop_shared_experts(shard.fp8);
    }
    return std::make_unique<CudaModelRunner>(shard.take_weights(), config, part);
  } else {
    if (drop_shared) drop_shared_experts(shard.weights.layers);
    auto runner = std::make_unique<CudaModelRunner>(shard.weights, config, part);
    shard.weights = {};  // uploaded
    return runner;
  }
}

// Global rank `global`'s shard among a process's (each names its rank), checked against the group.
template <typename Shard>
Shard& rank_shard(std::vector<Shard>& shards, int global, int tp_size, bool expert_parallel) {
  for (Shard& shard : shards) {
    const model::Bf16TpShard& base = base_of(shard);
    if (base.tp_rank != global) continue;
    TACHYON_CHECK(base.tp_size == tp_size && base.expert_parallel == (expert_parallel && tp_size > 1))
        << "internal: rank " << global << "'s shard was cut for a group of " << base.tp_size
        << (base.expert_parallel ? " with" : " without") << " expert parallelism";
    return shard;
  }
  TACHYON_FAIL() << "internal: no shard for tensor-parallel rank " << global;
}

// The ranks' runners over shards already cut (bf16 or FP8), each consumed as its rank uploads it.
template <typename Shard>
auto runners_over(std::vector<Shard>& shards, const core::EngineConfig& config) {
  return [&shards, &config](int global, int tp_size, bool expert_parallel, CudaTpRank part) {
    return shard_runner(rank_shard(shards, global, tp_size, expert_parallel), config, part);
  };
}

}  // namespace

TpCudaModelRunner::TpCudaModelRunner(const model::Bf16ModelWeights& full, const core::EngineConfig& config,
                                     TpCudaLayout layout, TpCommFactory make_comm, RankFailureHandler on_failure)
    : TpCudaModelRunner(
          full.config,
          [&](int global, int tp_size, bool expert_parallel, CudaTpRank part) {
            if (tp_size == 1) return std::make_unique<CudaModelRunner>(full, config, part);  // no copy
            model::Bf16TpShard shard = model::shard_weights(full, global, tp_size, expert_parallel);
            return shard_runner(shard, config, part);
          },
          config, std::move(layout), std::move(make_comm), std::move(on_failure)) {}

TpCudaModelRunner::TpCudaModelRunner(std::vector<model::Bf16TpShard> shards, const model::ModelConfig& full_config,
                                     const core::EngineConfig& config, TpCudaLayout layout, TpCommFactory make_comm,
                                     RankFailureHandler on_failure)
    : TpCudaModelRunner(full_config, runners_over(shards, config), config, std::move(layout), std::move(make_comm),
                        std::move(on_failure)) {}

TpCudaModelRunner::TpCudaModelRunner(std::vector<model::Fp8TpShard> shards, const model::ModelConfig& full_config,
                                     const core::EngineConfig& config, TpCudaLayout layout, TpCommFactory make_comm,
                                     RankFailureHandler on_failure)
    : TpCudaModelRunner(full_config, runners_over(shards, config), config, std::move(layout), std::move(make_comm),
                        std::move(on_failure)) {}

TpCudaModelRunner::TpCudaModelRunner(std::vector<model::gpu::CudaDenseWeights> weights,
                                     const model::ModelConfig& full_config, const core::EngineConfig& config,
                                     TpCudaLayout layout, TpCommFactory make_comm, RankFailureHandler on_failure)
    : TpCudaModelRunner(
          full_config,
          [&weights, &full_config, &config, first = layout.first_rank](int global, int tp_size, bool expert_parallel,
                                                                       CudaTpRank part) {
            const size_t local = static_cast<size_t>(global - first);
            TACHYON_CHECK(local < weights.size()) << "internal: no weights for tensor-parallel rank " << global;
            // The geometry the weights were cut with (stream_*_tp_gpu_weights: tp_shard_places).
            const model::Bf16TpShard base = model::shard_geometry<uint16_t>(
                full_config, global, tp_size, global, expert_parallel && tp_size > 1 ? tp_size : 0);
            return std::make_unique<CudaModelRunner>(std::move(weights[local]), config, rank_part(base, part));
          },
          config, std::move(layout), std::move(make_comm), std::move(on_failure)) {}

TpCudaModelRunner::TpCudaModelRunner(const model::ModelConfig& full_config, const RankRunnerFactory& make_runner,
                                     const core::EngineConfig& config, TpCudaLayout layout, TpCommFactory make_comm,
                                     RankFailureHandler on_failure)
    : vocab_size_(full_config.vocab_size),
      layout_(std::move(layout)),
      tp_size_(layout_.tp_size > 0 ? layout_.tp_size : static_cast<int>(layout_.devices.size())),
      make_comm_(std::move(make_comm)),
      ranks_(layout_.devices.size()),
      workers_(static_cast<int>(layout_.devices.size()), std::move(on_failure)) {
  const std::vector<int>& devices = layout_.devices;
  TACHYON_CHECK(!devices.empty()) << "tensor parallelism needs at least one GPU on this node";
  const bool expert_parallel = config.device.enable_expert_parallel;
  model::check_tp_size(full_config, tp_size_, expert_parallel);
  const std::string unsupported = model::cuda_tp_unsupported_reason(full_config, tp_size_, expert_parallel);
  TACHYON_CHECK(unsupported.empty()) << unsupported;
  const int dcp = config.device.decode_context_parallel_size;
  TACHYON_CHECK(!expert_parallel || (dcp == 1 && !config.device.enable_two_batch_overlap))
      << "expert parallelism on GPUs runs without --dcp and --tbo (the combinations its tests cover)";
  TACHYON_CHECK(dcp == 1 || (dcp == tp_size_ && full_config.is_mla() && tp_size_ == static_cast<int>(layout_.devices.size()) &&
                             config.block_size % (dcp * config.device.dcp_kv_cache_interleave_size) == 0))
      << "decode context parallelism on GPUs (--dcp " << dcp << ") splits a latent-attention model's cache over the "
      << "whole tensor-parallel group of one node: it needs --tp " << dcp << ", an MLA model (" << full_config.architecture
      << " is " << (full_config.is_mla() ? "one" : "not") << "), and a block size that is a multiple of --dcp x "
      << "--dcp-kv-cache-interleave-size";
  // One GPU per rank: a peer collective waiting for a rank whose kernel queues behind it on the
  // same GPU would never finish, and NCCL refuses such groups anyway. Tests share one GPU through
  // the host-staged communicator, eagerly, each rank with a fixed KV size.
  if (layout_.ranks_share_gpu) {
    TACHYON_CHECK(config.device.enforce_eager && config.device.kv_cache_memory_bytes > 0 &&
                  tp_size_ == static_cast<int>(devices.size()))
        << "ranks that share a GPU run on one node, eagerly, with kv_cache_memory_bytes set";
  } else {
    TACHYON_CHECK(std::set<int>(devices.begin(), devices.end()).size() == devices.size())
        << "tensor parallelism needs one GPU per rank";
  }
  TACHYON_CHECK(layout_.first_rank >= 0 && layout_.first_rank + static_cast<int>(devices.size()) <= tp_size_)
      << "internal: local ranks [" << layout_.first_rank << ", " << layout_.first_rank + devices.size()
      << ") outside a group of " << tp_size_;
  const int64_t max_blocks_per_seq = (config.scheduler.max_model_len + config.block_size - 1) / config.block_size;
  plan_capacity_ = std::max<size_t>(
      8 + max_encoded_plan_bytes(std::max(config.scheduler.max_num_batched_tokens, config.scheduler.max_num_seqs),
                                 config.scheduler.max_num_seqs, max_blocks_per_seq),
      static_cast<size_t>(tp_size_ + 1) * sizeof(StartUpInfo));
  workers_.run([&](int r) {
    TACHYON_CUDA_CHECK(cudaSetDevice(devices[static_cast<size_t>(r)]));
    Rank& rank = ranks_[static_cast<size_t>(r)];
    const int global = layout_.first_rank + r;
    rank.comm = make_comm_(global);
    TACHYON_CHECK(rank.comm->size() == tp_size_ && rank.comm->rank() == global)
        << "internal: rank " << global << " joined a group as rank " << rank.comm->rank() << " of " << rank.comm->size();
    if (multi_node()) {
      TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&rank.stream, cudaStreamNonBlocking));
      rank.plan_device = cuda::DeviceBuffer(plan_capacity_);
      rank.plan_host = cuda::PinnedBuffer(plan_capacity_);
    }
    rank.runner = make_runner(global, tp_size_, expert_parallel, CudaTpRank{.comm = rank.comm.get()});
  });
  num_blocks_ = ranks_[0].runner->num_blocks();
  for (const Rank& rank : ranks_) num_blocks_ = std::min(num_blocks_, rank.runner->num_blocks());
  if (multi_node()) agree_on_start_up(config);
}

void TpCudaModelRunner::agree_on_start_up(const core::EngineConfig& config) {
  const std::string hash = config.plan_hash();
  TACHYON_CHECK(hash.size() == sizeof(StartUpInfo::plan_hash)) << "internal: plan hash of " << hash.size() << " chars";
  std::vector<StartUpInfo> everyone(static_cast<size_t>(tp_size_));
  workers_.run([&](int r) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    StartUpInfo mine{};
    std::memcpy(mine.plan_hash, hash.data(), sizeof(mine.plan_hash));
    mine.num_blocks = rank.runner->num_blocks();
    auto* device = static_cast<std::byte*>(rank.plan_device.data());
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(device, &mine, sizeof(mine), cudaMemcpyHostToDevice, rank.stream));
    rank.comm->all_gather(device, device + sizeof(mine), sizeof(mine), rank.stream);
    if (r == 0) {
      TACHYON_CUDA_CHECK(cudaMemcpyAsync(everyone.data(), device + sizeof(mine), everyone.size() * sizeof(mine),
                                         cudaMemcpyDeviceToHost, rank.stream));
    }
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(rank.stream));
  });
  for (int g = 0; g < tp_size_; ++g) {
    const StartUpInfo& info = everyone[static_cast<size_t>(g)];
    TACHYON_CHECK(std::memcmp(info.plan_hash, hash.data(), sizeof(info.plan_hash)) == 0)
        << "TP rank " << g << " was started with other engine options than rank " << layout_.first_rank
        << " (plan hash " << std::string(info.plan_hash, sizeof(info.plan_hash)) << " vs " << hash
        << "): start every node with the same model and options, apart from --node-rank";
    num_blocks_ = std::min(num_blocks_, info.num_blocks);
  }
}

TpCudaModelRunner::~TpCudaModelRunner() {
  try {
    if (multi_node() && is_leader()) broadcast_plan(nullptr);  // the followers' follow() returns
  } catch (...) {
    // A follower that is gone cannot be told; nothing is left for this process to do about it.
  }
  // On their own threads: a CUDA runner and an NCCL communicator end where they were made.
  try {
    workers_.run([&](int r) {
      Rank& rank = ranks_[static_cast<size_t>(r)];
      rank.runner.reset();
      rank.comm.reset();
      if (rank.stream != nullptr) cudaStreamDestroy(rank.stream);
      rank.stream = nullptr;
    });
  } catch (...) {
    // A destructor must not throw; a failing teardown leaves nothing for the caller to do.
  }
}

std::optional<core::StepPlan> TpCudaModelRunner::broadcast_plan(const core::StepPlan* plan) {
  std::vector<std::byte> bytes;
  if (plan != nullptr) bytes = encode_plan(*plan);
  TACHYON_CHECK(8 + bytes.size() <= plan_capacity_)
      << "internal: a plan of " << bytes.size() << " bytes exceeds the " << plan_capacity_ << "-byte buffer";
  workers_.run([&](int r) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    const bool root = layout_.first_rank + r == 0;
    auto* host = rank.plan_host.as<std::byte>();
    auto* device = static_cast<std::byte*>(rank.plan_device.data());
    if (root) {
      const int64_t length = static_cast<int64_t>(bytes.size());
      std::memcpy(host, &length, sizeof(length));
      if (!bytes.empty()) std::memcpy(host + 8, bytes.data(), bytes.size());
      TACHYON_CUDA_CHECK(cudaMemcpyAsync(device, host, 8 + bytes.size(), cudaMemcpyHostToDevice, rank.stream));
    }
    rank.comm->broadcast(device, 8, /*root=*/0, rank.stream);
    if (!root) TACHYON_CUDA_CHECK(cudaMemcpyAsync(host, device, 8, cudaMemcpyDeviceToHost, rank.stream));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(rank.stream));
    int64_t length = 0;
    std::memcpy(&length, host, sizeof(length));
    TACHYON_CHECK(length >= 0 && static_cast<size_t>(length) + 8 <= plan_capacity_)
        << "a plan of " << length << " bytes from the leader does not fit this node's " << plan_capacity_
        << "-byte buffer: start every node with the same options";
    if (length == 0) return;
    rank.comm->broadcast(device + 8, static_cast<size_t>(length), /*root=*/0, rank.stream);
    if (!is_leader()) {
      TACHYON_CUDA_CHECK(cudaMemcpyAsync(host + 8, device + 8, static_cast<size_t>(length), cudaMemcpyDeviceToHost,
                                         rank.stream));
    }
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(rank.stream));
  });
  if (is_leader()) return std::nullopt;
  const auto* host = ranks_[0].plan_host.as<std::byte>();
  int64_t length = 0;
  std::memcpy(&length, host, sizeof(length));
  if (length == 0) return std::nullopt;
  return decode_plan(std::span<const std::byte>(host + 8, static_cast<size_t>(length)));
}

core::StepOutput TpCudaModelRunner::run(const core::StepPlan& plan) {
  if (plan.empty()) return {};
  TACHYON_CHECK(is_leader()) << "internal: run() on a follower node; it runs follow()";
  TACHYON_CHECK(!plan.has_drafts() || verifies_drafts())
      << "the tensor-parallel CUDA runner over several nodes does not verify draft tokens yet (drafts do not travel "
      << "to the other nodes): use one node for speculative decoding";
  if (multi_node()) broadcast_plan(&plan);
  workers_.run([&](int r) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    rank.runner->launch(plan);
    rank.output = rank.runner->wait();
  });
  return std::move(ranks_[0].output);
}

void TpCudaModelRunner::follow() {
  TACHYON_CHECK(!is_leader()) << "internal: follow() on the leader node";
  for (;;) {
    std::optional<core::StepPlan> plan = broadcast_plan(nullptr);
    if (!plan) return;
    workers_.run([&](int r) { ranks_[static_cast<size_t>(r)].runner->execute(*plan); });
  }
}

double TpCudaModelRunner::last_step_device_ms() const { return ranks_[0].runner->last_step_device_ms(); }

}  // namespace tachyon::runner
