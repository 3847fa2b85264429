// PeerWorld setup and the PeerCommunicator's routing: plan (dist/peer_plan.h), then one kernel
// launch per chunk (peer_collectives.cu) or one call of the fallback. See the header.
#include "tachyon/dist/cuda/peer_communicator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>

#include "tachyon/base/check.h"
#include "tachyon/tensor/cuda/device_guard.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::dist {
namespace {

using cuda::as_stream;
using cuda::DeviceGuard;

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  auto a0 = reinterpret_cast<uintptr_t>(a), b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

// Where the sync region starts inside a rank's allocation: after the data, 256-byte aligned.
size_t sync_offset(size_t capacity) { return (capacity + 255) / 256 * 256; }

// Blocks per launch so that the kernels of all ranks sharing a GPU fit on it at once, counting
// one block per SM (peer_collectives.cu, "Co-residency").
int co_resident_blocks(const std::vector<int>& devices) {
  int blocks = kPeerMaxBlocks;
  for (int device : std::set<int>(devices.begin(), devices.end())) {
    int sms = 0;
    TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    const int sharing = static_cast<int>(std::count(devices.begin(), devices.end(), device));
    TACHYON_CHECK(sms >= sharing) << "PeerWorld: " << sharing << " ranks on GPU " << device << " with " << sms
                                  << " SMs cannot all keep a block resident; put fewer ranks on one GPU";
    blocks = std::min(blocks, sms / sharing);
  }
  return blocks;
}

void enable_peer_access(const std::vector<int>& devices) {
  const std::set<int> distinct(devices.begin(), devices.end());
  for (int from : distinct) {
    TACHYON_CUDA_CHECK(cudaSetDevice(from));
    for (int to : distinct) {
      if (to == from) continue;
      const cudaError_t status = cudaDeviceEnablePeerAccess(to, 0);
      if (status == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // already on (another world, or NCCL): fine, and clear the sticky status
        continue;
      }
      TACHYON_CHECK(status == cudaSuccess) << "PeerWorld: cudaDeviceEnablePeerAccess from GPU " << from << " to GPU "
                                           << to << ": " << cudaGetErrorString(status);
    }
  }
}

}  // namespace

bool PeerWorld::supported(const std::vector<int>& devices) {
  if (devices.empty() || devices.size() > static_cast<size_t>(kPeerMaxRanks)) return false;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return false;
  const std::set<int> distinct(devices.begin(), devices.end());
  for (int a : distinct) {
    if (a < 0 || a >= count) return false;
    for (int b : distinct) {
      int can = 0;
      if (a != b && (cudaDeviceCanAccessPeer(&can, a, b) != cudaSuccess || can == 0)) return false;
    }
  }
  return true;
}

PeerWorld::PeerWorld(std::vector<int> devices, size_t buffer_bytes, double hang_timeout_s)
    : devices_(std::move(devices)), barrier_(static_cast<int>(devices_.size())) {
  const int ranks = static_cast<int>(devices_.size());
  TACHYON_CHECK(ranks >= 1 && ranks <= kPeerMaxRanks)
      << "PeerWorld: " << ranks << " ranks; the peer collectives serve 1 to " << kPeerMaxRanks;
  TACHYON_CHECK(buffer_bytes >= kPeerUnitBytes && buffer_bytes % kPeerUnitBytes == 0)
      << "PeerWorld: buffer_bytes " << buffer_bytes << " must be a positive multiple of " << kPeerUnitBytes;
  TACHYON_CHECK(hang_timeout_s >= 0) << "PeerWorld: hang_timeout_s " << hang_timeout_s << " is negative";
  TACHYON_CHECK(supported(devices_))
      << "PeerWorld: these GPUs cannot all access each other's memory (cudaDeviceCanAccessPeer), or a device "
         "index is invalid; use the NCCL communicator alone";
  DeviceGuard guard;
  view_.ranks = ranks;
  view_.capacity = buffer_bytes;
  view_.hang_timeout_ns = static_cast<uint64_t>(hang_timeout_s * 1e9);
  try {
    view_.max_blocks = co_resident_blocks(devices_);
    enable_peer_access(devices_);
    const size_t sync_bytes = kPeerSyncWords * sizeof(uint32_t);
    for (int r = 0; r < ranks; ++r) {
      TACHYON_CUDA_CHECK(cudaSetDevice(devices_[r]));
      void* pointer = nullptr;
      const size_t bytes = sync_offset(buffer_bytes) + sync_bytes;
      const cudaError_t status = cudaMalloc(&pointer, bytes);
      TACHYON_CHECK(status == cudaSuccess) << "PeerWorld: cudaMalloc of " << bytes << " bytes for rank " << r
                                           << " on GPU " << devices_[r] << ": " << cudaGetErrorString(status);
      allocations_.push_back({devices_[r], pointer});
      auto* base = static_cast<std::byte*>(pointer);
      auto* sync = reinterpret_cast<uint32_t*>(base + sync_offset(buffer_bytes));
      view_.data[r] = base;
      view_.flags[r] = sync;
      view_.counters[r] = sync + kPeerSyncWords / 2;
      TACHYON_CUDA_CHECK(cudaMemset(sync, 0, sync_bytes));
    }
    // Epochs start at zero everywhere before any rank thread can launch on another stream.
    for (int device : std::set<int>(devices_.begin(), devices_.end())) {
      TACHYON_CUDA_CHECK(cudaSetDevice(device));
      TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
    }
  } catch (...) {
    free_allocations();
    throw;
  }
}

PeerWorld::~PeerWorld() { free_allocations(); }

void PeerWorld::free_allocations() noexcept {
  int saved = 0;
  const bool have_saved = cudaGetDevice(&saved) == cudaSuccess;
  for (const Allocation& allocation : allocations_) {
    cudaSetDevice(allocation.device);
    cudaFree(allocation.pointer);  // errors at teardown are dropped
  }
  allocations_.clear();
  if (have_saved) cudaSetDevice(saved);
}

PeerCommunicator::PeerCommunicator(PeerWorld& world, int rank, Communicator* fallback)
    : world_(world), rank_(rank), fallback_(fallback) {
  TACHYON_CHECK(rank >= 0 && rank < world.size())
      << "PeerCommunicator: rank " << rank << " is outside a world of " << world.size();
  if (fallback != nullptr) {
    TACHYON_CHECK(fallback->size() == world.size() && fallback->rank() == rank)
        << "PeerCommunicator: the fallback is rank " << fallback->rank() << " of " << fallback->size()
        << ", this communicator rank " << rank << " of " << world.size() << "; pass the same group's communicator";
  }
  check_call("PeerCommunicator", nullptr, 0, nullptr, 0, false);
}

PeerCommunicator::PeerCommunicator(PeerWorld& world, int rank, std::unique_ptr<Communicator> fallback)
    : PeerCommunicator(world, rank, fallback.get()) {
  owned_fallback_ = std::move(fallback);
}

Communicator& PeerCommunicator::fallback(std::string_view op) const {
  TACHYON_CHECK(fallback_ != nullptr)
      << "rank " << rank_ << " of " << size() << ": " << op
      << " needs NCCL: the peer communicator runs only all_reduce (f32, bf16, f16) and all_gather over GPU peer "
         "memory; build it with an NcclCommunicator as its fallback";
  return *fallback_;
}

void PeerCommunicator::check_call(std::string_view op, const void* send, size_t send_bytes, const void* recv,
                                  size_t recv_bytes, bool in_place) const {
  int current = -1;
  TACHYON_CUDA_CHECK(cudaGetDevice(&current));
  const int expected = world_.device(rank_);
  TACHYON_CHECK(current == expected) << "rank " << rank_ << " of " << size() << ": " << op
                                     << ": the current CUDA device is " << current << " but this rank's is " << expected
                                     << "; call from the rank's thread after cudaSetDevice(" << expected << ")";
  TACHYON_CHECK(send_bytes == 0 || send != nullptr)
      << "rank " << rank_ << ": " << op << ": send is null for " << send_bytes << " bytes";
  TACHYON_CHECK(recv_bytes == 0 || recv != nullptr)
      << "rank " << rank_ << ": " << op << ": recv is null for " << recv_bytes << " bytes";
  TACHYON_CHECK(in_place || !overlaps(send, send_bytes, recv, recv_bytes))
      << "rank " << rank_ << ": " << op << ": send and recv overlap other than in place";
}

void PeerCommunicator::all_reduce(const void* send, void* recv, size_t count, ReduceType type, void* stream) {
  const size_t bytes = count * reduce_type_size(type);
  const bool summable = type == ReduceType::kF32 || type == ReduceType::kBF16 || type == ReduceType::kF16;
  if (!summable) {
    Communicator& other = fallback(std::string("all_reduce of ") + std::string(reduce_type_name(type)));
    last_path_ = Path::kFallback;
    return other.all_reduce(send, recv, count, type, stream);
  }
  const PeerPlan plan = plan_all_reduce(bytes, size(), world_.buffer_bytes(), fallback_ != nullptr);
  if (plan.path == Path::kFallback) {
    last_path_ = Path::kFallback;
    return fallback_->all_reduce(send, recv, count, type, stream);
  }
  check_call("all_reduce", send, bytes, recv, bytes, send == recv);
  last_path_ = plan.path;
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  for (size_t offset = 0; offset < bytes; offset += plan.chunk_bytes) {
    const size_t chunk = std::min(plan.chunk_bytes, bytes - offset);
    launch_peer_all_reduce(world_.view_, rank_, all_reduce_path(chunk, size()), type, in + offset, out + offset, chunk,
                           as_stream(stream));
  }
}

void PeerCommunicator::all_gather(const void* send, void* recv, size_t bytes, void* stream) {
  const PeerPlan plan = plan_all_gather(bytes, size(), world_.buffer_bytes(), fallback_ != nullptr);
  if (plan.path == Path::kFallback) {
    last_path_ = Path::kFallback;
    return fallback_->all_gather(send, recv, bytes, stream);
  }
  auto* out = static_cast<std::byte*>(recv);
  const bool in_place = out != nullptr && send == out + rank_ * bytes;
  check_call("all_gather", send, bytes, recv, bytes * size(), in_place);
  last_path_ = plan.path;
  const auto* in = static_cast<const std::byte*>(send);
  for (size_t offset = 0; offset < bytes; offset += plan.chunk_bytes) {
    const size_t chunk = std::min(plan.chunk_bytes, bytes - offset);
    launch_peer_all_gather(world_.view_, rank_, in + offset, out + offset, chunk, bytes, as_stream(stream));
  }
}

void PeerCommunicator::reduce_scatter(const void* send, void* recv, size_t count, ReduceType type, void* stream) {
  fallback("reduce_scatter").reduce_scatter(send, recv, count, type, stream);
}

void PeerCommunicator::broadcast(void* data, size_t bytes, int root, void* stream) {
  fallback("broadcast").broadcast(data, bytes, root, stream);
}

void PeerCommunicator::all_gatherv(std::span<const GatherItem> items, void* stream) {
  fallback("all_gatherv").all_gatherv(items, stream);
}

void PeerCommunicator::all_to_all_v(std::span<const AllToAllItem> /*items*/, void* /*stream*/) {
  throw NotImplementedOnBackend("rank " + std::to_string(rank_) + " of " + std::to_string(size()) +
                                ": all_to_all_v is not implemented on the peer-access communicator yet (expert-"
                                "parallel dispatch runs on CPU thread ranks: --device cpu)");
}

void PeerCommunicator::send(const void* data, size_t bytes, int peer, void* stream) {
  fallback("send").send(data, bytes, peer, stream);
}

void PeerCommunicator::recv(void* data, size_t bytes, int peer, void* stream) {
  fallback("recv").recv(data, bytes, peer, stream);
}

void PeerCommunicator::send_recv(const void* send_data, size_t send_bytes, int dst, void* recv_data, size_t recv_bytes,
                                 int src, void* stream) {
  fallback("send_recv").send_recv(send_data, send_bytes, dst, recv_data, recv_bytes, src, stream);
}

void PeerCommunicator::barrier() { world_.barrier_.arrive_and_wait(); }

}  // namespace tachyon::dist
