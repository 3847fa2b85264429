// NcclCommunicator: each Communicator call is one NCCL call (or one NCCL group) on the caller's
// stream; see the header for the mapping and the all_gatherv design.
#include "tachyon/dist/nccl/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <cstdlib>

#include "tachyon/base/check.h"
#include "tachyon/tensor/cuda/device_guard.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::dist {
namespace {

// An NCCL call of this communicator: the message names the rank, the call, NCCL's error string
// and the communicator's last error.
#define TACHYON_NCCL_COMM_CHECK(call)                                                      \
  do {                                                                                     \
    const ncclResult_t tachyon_nccl_status = (call);                                       \
    TACHYON_CHECK(tachyon_nccl_status == ncclSuccess)                                      \
        << "rank " << rank_ << " of " << size_ << ": " << #call << ": "                    \
        << ncclGetErrorString(tachyon_nccl_status) << " (" << ncclGetLastError(comm_) << ")"; \
  } while (0)

using cuda::as_stream;
using cuda::DeviceGuard;

}  // namespace

void nccl_disable_multicast() {
  // Overwrite: NVLS multicast can take the shared machine's GPUs out of service (KINDS.md).
  setenv("NCCL_NVLS_ENABLE", "0", 1);
}

ncclUniqueId nccl_unique_id() {
  nccl_disable_multicast();
  ncclUniqueId id;
  TACHYON_NCCL_CHECK(ncclGetUniqueId(&id));
  return id;
}

ncclUniqueId nccl_unique_id_at(const std::string& addr, int port) {
  TACHYON_CHECK(!addr.empty() && port > 0 && port < 65536)
      << "the NCCL bootstrap address needs a host and a port in 1..65535, got '" << addr << "':" << port;
  const std::string where = addr + ":" + std::to_string(port);
  setenv("NCCL_COMM_ID", where.c_str(), 1);
  nccl_disable_multicast();
  ncclUniqueId id;
  const ncclResult_t status = ncclGetUniqueId(&id);
  TACHYON_CHECK(status == ncclSuccess) << "NCCL cannot use the bootstrap address " << where << ": "
                                       << ncclGetErrorString(status) << " (use <ipv4>:<port> or <hostname>:<port>)";
  return id;
}

ncclDataType_t nccl_data_type(ReduceType type) {
  switch (type) {
    case ReduceType::kF32:
      return ncclFloat32;
    case ReduceType::kBF16:
      return ncclBfloat16;
    case ReduceType::kF16:
      return ncclFloat16;
    case ReduceType::kI32:
      return ncclInt32;
    case ReduceType::kI64:
      return ncclInt64;
  }
  TACHYON_FAIL() << "unknown ReduceType " << static_cast<int>(type);
  return ncclFloat32;  // unreachable
}

NcclCommunicator::NcclCommunicator(const ncclUniqueId& id, int size, int rank) : rank_(rank), size_(size) {
  TACHYON_CHECK(size >= 1 && rank >= 0 && rank < size)
      << "NcclCommunicator: rank " << rank << " outside [0, " << size << ")";
  TACHYON_NCCL_COMM_CHECK(ncclCommInitRank(&comm_, size, id, rank));
  init_state();
}

NcclCommunicator::NcclCommunicator(ncclComm_t comm) : comm_(comm) {
  TACHYON_CHECK(comm != nullptr) << "NcclCommunicator: null ncclComm_t";
  init_state();
}

void NcclCommunicator::init_state() {
  TACHYON_NCCL_COMM_CHECK(ncclCommUserRank(comm_, &rank_));
  TACHYON_NCCL_COMM_CHECK(ncclCommCount(comm_, &size_));
  TACHYON_NCCL_COMM_CHECK(ncclCommCuDevice(comm_, &device_));
  DeviceGuard guard;
  TACHYON_CUDA_CHECK(cudaSetDevice(device_));
  cudaStream_t stream = nullptr;
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  barrier_stream_ = stream;
  TACHYON_CUDA_CHECK(cudaMalloc(&barrier_value_, sizeof(int)));
  TACHYON_CUDA_CHECK(cudaMemset(barrier_value_, 0, sizeof(int)));
}

NcclCommunicator::~NcclCommunicator() {
  // No throwing from here: errors at teardown are dropped.
  int saved = 0;
  bool have_saved = cudaGetDevice(&saved) == cudaSuccess;
  cudaSetDevice(device_);
  if (barrier_stream_ != nullptr) {
    cudaStreamSynchronize(as_stream(barrier_stream_));
    cudaStreamDestroy(as_stream(barrier_stream_));
  }
  if (barrier_value_ != nullptr) cudaFree(barrier_value_);
  if (comm_ != nullptr) ncclCommDestroy(comm_);
  if (have_saved) cudaSetDevice(saved);
}

void NcclCommunicator::check_peer(const char* op, int peer) const {
  TACHYON_CHECK(peer >= 0 && peer < size_)
      << "rank " << rank_ << " of " << size_ << ": " << op << ": peer " << peer << " is outside [0, " << size_ << ")";
}

void NcclCommunicator::all_reduce(const void* send, void* recv, size_t count, ReduceType type, void* stream) {
  if (count == 0) return;
  TACHYON_NCCL_COMM_CHECK(ncclAllReduce(send, recv, count, nccl_data_type(type), ncclSum, comm_, as_stream(stream)));
}

void NcclCommunicator::all_gather(const void* send, void* recv, size_t bytes, void* stream) {
  if (bytes == 0) return;
  TACHYON_NCCL_COMM_CHECK(ncclAllGather(send, recv, bytes, ncclUint8, comm_, as_stream(stream)));
}

void NcclCommunicator::reduce_scatter(const void* send, void* recv, size_t count, ReduceType type, void* stream) {
  if (count == 0) return;
  TACHYON_NCCL_COMM_CHECK(
      ncclReduceScatter(send, recv, count, nccl_data_type(type), ncclSum, comm_, as_stream(stream)));
}

void NcclCommunicator::broadcast(void* data, size_t bytes, int root, void* stream) {
  TACHYON_CHECK(root >= 0 && root < size_)
      << "rank " << rank_ << " of " << size_ << ": broadcast: root " << root << " is outside [0, " << size_ << ")";
  if (bytes == 0) return;
  TACHYON_NCCL_COMM_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, as_stream(stream)));
}

// One NCCL group: for each item, for each rank r with a non-zero run, a broadcast rooted at r of
// its run into recv + offset(r). The root's own broadcast also copies its send bytes into its
// recv (or is in place when send == recv + offset). NCCL fuses the group into one launch.
void NcclCommunicator::all_gatherv(std::span<const GatherItem> items, void* stream) {
  // Local checks first, so that nothing is enqueued when this rank's arguments are bad.
  for (size_t i = 0; i < items.size(); ++i) {
    const GatherItem& item = items[i];
    TACHYON_CHECK(item.recv_counts.size() == static_cast<size_t>(size_))
        << "rank " << rank_ << " of " << size_ << ": all_gatherv: item " << i << " has " << item.recv_counts.size()
        << " recv_counts, expected " << size_;
    TACHYON_CHECK(item.send_bytes == item.recv_counts[rank_])
        << "rank " << rank_ << " of " << size_ << ": all_gatherv: item " << i << " sends " << item.send_bytes
        << " bytes but recv_counts[" << rank_ << "] is " << item.recv_counts[rank_];
    TACHYON_CHECK(gather_total_bytes(item) == 0 || item.recv != nullptr)
        << "rank " << rank_ << " of " << size_ << ": all_gatherv: item " << i << " has a null recv buffer";
  }
  bool any = false;
  for (const GatherItem& item : items) any = any || gather_total_bytes(item) > 0;
  if (!any) return;
  TACHYON_NCCL_COMM_CHECK(ncclGroupStart());
  try {
    for (const GatherItem& item : items) {
      size_t offset = 0;
      for (int owner = 0; owner < size_; ++owner) {
        size_t count = item.recv_counts[owner];
        if (count > 0) {
          void* dst = static_cast<std::byte*>(item.recv) + offset;
          const void* src = owner == rank_ ? item.send : dst;
          TACHYON_NCCL_COMM_CHECK(ncclBroadcast(src, dst, count, ncclUint8, owner, comm_, as_stream(stream)));
        }
        offset += count;
      }
    }
  } catch (...) {
    ncclGroupEnd();  // close the group so the thread's NCCL state stays usable
    throw;
  }
  TACHYON_NCCL_COMM_CHECK(ncclGroupEnd());
}

void NcclCommunicator::send(const void* data, size_t bytes, int peer, void* stream) {
  check_peer("send", peer);
  TACHYON_CHECK(peer != rank_) << "rank " << rank_ << " of " << size_
                               << ": send: a lone send to itself cannot be matched on NCCL; use send_recv";
  if (bytes == 0) return;
  TACHYON_NCCL_COMM_CHECK(ncclSend(data, bytes, ncclUint8, peer, comm_, as_stream(stream)));
}

void NcclCommunicator::recv(void* data, size_t bytes, int peer, void* stream) {
  check_peer("recv", peer);
  TACHYON_CHECK(peer != rank_) << "rank " << rank_ << " of " << size_
                               << ": recv: a lone recv from itself cannot be matched on NCCL; use send_recv";
  if (bytes == 0) return;
  TACHYON_NCCL_COMM_CHECK(ncclRecv(data, bytes, ncclUint8, peer, comm_, as_stream(stream)));
}

void NcclCommunicator::send_recv(const void* send_data, size_t send_bytes, int dst, void* recv_data, size_t recv_bytes,
                                 int src, void* stream) {
  check_peer("send_recv", dst);
  check_peer("send_recv", src);
  if (send_bytes == 0 && recv_bytes == 0) return;
  TACHYON_NCCL_COMM_CHECK(ncclGroupStart());
  try {
    if (send_bytes > 0)
      TACHYON_NCCL_COMM_CHECK(ncclSend(send_data, send_bytes, ncclUint8, dst, comm_, as_stream(stream)));
    if (recv_bytes > 0)
      TACHYON_NCCL_COMM_CHECK(ncclRecv(recv_data, recv_bytes, ncclUint8, src, comm_, as_stream(stream)));
  } catch (...) {
    ncclGroupEnd();
    throw;
  }
  TACHYON_NCCL_COMM_CHECK(ncclGroupEnd());
}

// One NCCL group holding, per item and per peer, an ncclSend of this rank's run for that peer
// and an ncclRecv of the peer's run for this rank (zero counts skipped; the run to itself is a
// self send/recv, which NCCL matches inside a group): one launch for every item and peer, and no
// ordering of the pairs can hang because the group posts them all at once.
void NcclCommunicator::all_to_all_v(std::span<const AllToAllItem> items, void* stream) {
  // Local checks first, so that nothing is enqueued when this rank's arguments are bad.
  bool any = false;
  for (size_t i = 0; i < items.size(); ++i) {
    const AllToAllItem& item = items[i];
    TACHYON_CHECK(item.send_counts.size() == static_cast<size_t>(size_) &&
                  item.recv_counts.size() == static_cast<size_t>(size_))
        << "rank " << rank_ << " of " << size_ << ": all_to_all_v: item " << i << " has " << item.send_counts.size()
        << " send_counts and " << item.recv_counts.size() << " recv_counts, expected " << size_;
    TACHYON_CHECK(item.send_counts[rank_] == item.recv_counts[rank_])
        << "rank " << rank_ << " of " << size_ << ": all_to_all_v: item " << i << " sends itself "
        << item.send_counts[rank_] << " bytes but expects " << item.recv_counts[rank_] << " from itself";
    const size_t sent = run_offset(item.send_counts, size_), received = run_offset(item.recv_counts, size_);
    TACHYON_CHECK((sent == 0 || item.send != nullptr) && (received == 0 || item.recv != nullptr))
        << "rank " << rank_ << " of " << size_ << ": all_to_all_v: item " << i << " has a null buffer";
    any = any || sent > 0 || received > 0;
  }
  if (!any) return;
  TACHYON_NCCL_COMM_CHECK(ncclGroupStart());
  try {
    for (const AllToAllItem& item : items) {
      size_t send_offset = 0, recv_offset = 0;
      for (int peer = 0; peer < size_; ++peer) {
        const size_t send_bytes = item.send_counts[peer], recv_bytes = item.recv_counts[peer];
        if (send_bytes > 0) {
          TACHYON_NCCL_COMM_CHECK(ncclSend(static_cast<const std::byte*>(item.send) + send_offset, send_bytes,
                                           ncclUint8, peer, comm_, as_stream(stream)));
        }
        if (recv_bytes > 0) {
          TACHYON_NCCL_COMM_CHECK(ncclRecv(static_cast<std::byte*>(item.recv) + recv_offset, recv_bytes, ncclUint8,
                                           peer, comm_, as_stream(stream)));
        }
        send_offset += send_bytes;
        recv_offset += recv_bytes;
      }
    }
  } catch (...) {
    ncclGroupEnd();  // close the group so the thread's NCCL state stays usable
    throw;
  }
  TACHYON_NCCL_COMM_CHECK(ncclGroupEnd());
}

void NcclCommunicator::barrier() {
  cudaStream_t stream = as_stream(barrier_stream_);
  TACHYON_NCCL_COMM_CHECK(ncclAllReduce(barrier_value_, barrier_value_, 1, ncclInt32, ncclSum, comm_, stream));
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream));
}

std::vector<std::unique_ptr<NcclCommunicator>> make_local_nccl_communicators(std::span<const int> devices) {
  TACHYON_CHECK(!devices.empty()) << "make_local_nccl_communicators: no devices";
  nccl_disable_multicast();
  DeviceGuard guard;
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  TACHYON_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()));
  std::vector<std::unique_ptr<NcclCommunicator>> result;
  size_t adopted = 0;
  try {
    for (; adopted < comms.size(); ++adopted) result.push_back(std::make_unique<NcclCommunicator>(comms[adopted]));
  } catch (...) {
    for (size_t i = adopted; i < comms.size(); ++i) ncclCommDestroy(comms[i]);
    throw;
  }
  return result;
}

}  // namespace tachyon::dist
