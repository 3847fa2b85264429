// Forwarding and counting (see counting_communicator.h). Counted before forwarding, so a call the
// inner backend refuses (NotImplementedOnBackend, a size mismatch) still shows as attempted.
#include "tachyon/dist/counting_communicator.h"

namespace tachyon::dist {
namespace {

size_t sum_of(std::span<const size_t> counts) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

}  // namespace

std::string_view collective_kind_name(CollectiveKind kind) {
  static constexpr std::string_view kNames[kNumCollectiveKinds] = {
      "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_gatherv",
      "all_to_all_v", "send", "recv", "send_recv", "barrier"};
  return kNames[static_cast<size_t>(kind)];
}

int64_t CollectiveCounts::collectives() const {
  int64_t total = 0;
  for (size_t k = 0; k < kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    if (kind != CollectiveKind::kSend && kind != CollectiveKind::kRecv && kind != CollectiveKind::kSendRecv) {
      total += calls[k];
    }
  }
  return total;
}

int64_t CollectiveCounts::total_received() const {
  int64_t total = 0;
  for (int64_t b : received) total += b;
  return total;
}

void CountingCommunicator::all_reduce(const void* send, void* recv, size_t count, ReduceType type, void* stream) {
  const size_t bytes = count * reduce_type_size(type);
  this->count(CollectiveKind::kAllReduce, bytes, bytes);
  inner_.all_reduce(send, recv, count, type, stream);
}

void CountingCommunicator::all_gather(const void* send, void* recv, size_t bytes, void* stream) {
  count(CollectiveKind::kAllGather, bytes, bytes * static_cast<size_t>(size()));
  inner_.all_gather(send, recv, bytes, stream);
}

void CountingCommunicator::reduce_scatter(const void* send, void* recv, size_t count, ReduceType type, void* stream) {
  const size_t bytes = count * reduce_type_size(type);
  this->count(CollectiveKind::kReduceScatter, bytes * static_cast<size_t>(size()), bytes);
  inner_.reduce_scatter(send, recv, count, type, stream);
}

void CountingCommunicator::broadcast(void* data, size_t bytes, int root, void* stream) {
  count(CollectiveKind::kBroadcast, rank() == root ? bytes : 0, rank() == root ? 0 : bytes);
  inner_.broadcast(data, bytes, root, stream);
}

void CountingCommunicator::all_gatherv(std::span<const GatherItem> items, void* stream) {
  size_t sent = 0, received = 0;
  for (const GatherItem& item : items) {
    sent += item.send_bytes;
    received += sum_of(item.recv_counts);
  }
  count(CollectiveKind::kAllGatherv, sent, received);
  inner_.all_gatherv(items, stream);
}

void CountingCommunicator::all_to_all_v(std::span<const AllToAllItem> items, void* stream) {
  size_t sent = 0, received = 0;
  for (const AllToAllItem& item : items) {
    sent += sum_of(item.send_counts);
    received += sum_of(item.recv_counts);
  }
  count(CollectiveKind::kAllToAllV, sent, received);
  inner_.all_to_all_v(items, stream);
}

void CountingCommunicator::send(const void* data, size_t bytes, int peer, void* stream) {
  count(CollectiveKind::kSend, bytes, 0);
  inner_.send(data, bytes, peer, stream);
}

void CountingCommunicator::recv(void* data, size_t bytes, int peer, void* stream) {
  count(CollectiveKind::kRecv, 0, bytes);
  inner_.recv(data, bytes, peer, stream);
}

void CountingCommunicator::send_recv(const void* send_data, size_t send_bytes, int dst, void* recv_data,
                                     size_t recv_bytes, int src, void* stream) {
  count(CollectiveKind::kSendRecv, send_bytes, recv_bytes);
  inner_.send_recv(send_data, send_bytes, dst, recv_data, recv_bytes, src, stream);
}

void CountingCommunicator::barrier() {
  count(CollectiveKind::kBarrier, 0, 0);
  inner_.barrier();
}

}  // namespace tachyon::dist
