// CountingCommunicator: a Communicator that forwards every call to an inner one and counts the
// calls per kind, with the bytes this rank sends in them. It exists so that "how many collectives
// does a step (a layer) make" is a test: wrap a rank's communicator, run the step, read counts().
// It adds no synchronization and changes no argument, so results are the inner backend's bits.
// Bytes per call, as this rank sees them: sent = what it contributes (reductions: its whole send
// buffer; all_gatherv: its items' send_bytes; all_to_all_v: its send_counts), received = what lands
// in its recv buffers (all_gather: size x bytes; all_gatherv / all_to_all_v: the recv counts;
// reductions: the result). Received bytes are what DCP's exchange divides by the group size.
// Tests: tests/unit/test_counting_communicator.cpp; used by test_dcp_families.cpp, test_pcp_families.cpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tachyon/dist/communicator.h"

namespace tachyon::dist {

// The kinds of call a Communicator has, one counter each.
enum class CollectiveKind {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kAllGatherv,
  kAllToAllV,
  kSend,
  kRecv,
  kSendRecv,
  kBarrier,
};
inline constexpr size_t kNumCollectiveKinds = 10;
std::string_view collective_kind_name(CollectiveKind kind);  // "all_reduce", "all_gatherv", ...

struct CollectiveCounts {
  std::array<int64_t, kNumCollectiveKinds> calls{};
  std::array<int64_t, kNumCollectiveKinds> sent{};      // bytes
  std::array<int64_t, kNumCollectiveKinds> received{};  // bytes
  int64_t of(CollectiveKind kind) const { return calls[static_cast<size_t>(kind)]; }
  int64_t sent_of(CollectiveKind kind) const { return sent[static_cast<size_t>(kind)]; }
  int64_t received_of(CollectiveKind kind) const { return received[static_cast<size_t>(kind)]; }
  // Calls that involve the whole group (everything but send, recv and send_recv).
  int64_t collectives() const;
  int64_t total_received() const;
};

class CountingCommunicator final : public Communicator {
 public:
  // `inner` must outlive this object.
  explicit CountingCommunicator(Communicator& inner) : inner_(inner) {}

  const CollectiveCounts& counts() const { return counts_; }
  void reset() { counts_ = {}; }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  void all_reduce(const void* send, void* recv, size_t count, ReduceType type, void* stream) override;
  void all_gather(const void* send, void* recv, size_t bytes, void* stream) override;
  void reduce_scatter(const void* send, void* recv, size_t count, ReduceType type, void* stream) override;
  void broadcast(void* data, size_t bytes, int root, void* stream) override;
  void all_gatherv(std::span<const GatherItem> items, void* stream) override;
  void all_to_all_v(std::span<const AllToAllItem> items, void* stream) override;
  void send(const void* data, size_t bytes, int peer, void* stream) override;
  void recv(void* data, size_t bytes, int peer, void* stream) override;
  void send_recv(const void* send_data, size_t send_bytes, int dst, void* recv_data, size_t recv_bytes, int src,
                 void* stream) override;
  void barrier() override;

 private:
  void count(CollectiveKind kind, size_t sent, size_t received) {
    ++counts_.calls[static_cast<size_t>(kind)];
    counts_.sent[static_cast<size_t>(kind)] += static_cast<int64_t>(sent);
    counts_.received[static_cast<size_t>(kind)] += static_cast<int64_t>(received);
  }

  Communicator& inner_;
  CollectiveCounts counts_;
};

}  // namespace tachyon::dist
