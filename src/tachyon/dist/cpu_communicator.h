// CpuCommunicator: the Communicator for ranks that are threads of one process sharing memory.
// It is the reference the NCCL backend is tested against and what CPU runs and tests use.
//
// A CpuWorld is created once per group instance (N ranks); each of the N threads then builds a
// CpuCommunicator(world, rank). A collective is one round on the world:
//   publish (this rank's pointers + arguments) -> barrier -> check that all ranks agree
//   -> read the peers' buffers directly (copy, or sum in rank order 0..N-1) -> barrier.
// Reductions sum into a per-rank scratch buffer and write recv only after the second barrier,
// so in-place calls are safe while peers still read this rank's send buffer.
// The one non-obvious decision: argument errors (bad root, sizes that differ between ranks,
// bad aliasing) are published instead of thrown at once, and every rank decides from the same
// published table after the first barrier; so all ranks throw the same tachyon::Error together
// instead of one throwing while the others wait forever, and the world stays usable.
// Point to point goes through per-destination mailboxes; send copies its bytes into the peer's
// mailbox and returns (eager), so no pairing of sends and recvs can deadlock.
// A rank that fails OUTSIDE a collective never arrives at the next one, and its peers would wait
// there forever: whoever catches that failure (RankWorkers' on_failure) calls CpuWorld::abort, which
// wakes every rank waiting in a collective or a recv of the world, and makes every later call,
// with GroupAborted naming the failed rank (ncclCommAbort's contract: the world stays dead). A
// round whose opening barrier every rank passed still completes (its closing barrier ignores the
// abort), so no rank leaves while a peer still reads its buffers.
// Tests: tests/unit/test_cpu_communicator.cpp.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tachyon/dist/communicator.h"

namespace tachyon::dist {

// Thrown by every call on an aborted CpuWorld: a rank of the group failed outside a collective,
// so the collective this rank waits in can never complete. what() names that rank and its error.
class GroupAborted : public Error {
 public:
  using Error::Error;
};

// A reusable barrier for a fixed number of threads (mutex + condition variable + generation).
// The mutex makes every write before arrive_and_wait() visible to every thread after it.
class ThreadBarrier {
 public:
  explicit ThreadBarrier(int count) : count_(count) {}
  // Waits until every thread has arrived, abort() or not.
  void arrive_and_wait();
  // The same, but returns false instead of waiting once abort() has been called (before this
  // call or while it waits) and this generation has not completed.
  bool arrive_and_wait_unless_aborted();
  // Wakes every thread in arrive_and_wait_unless_aborted() and fails all later ones; for good.
  void abort();

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int count_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

// The state the N ranks of one group share. Create it before the rank threads start and keep it
// alive until they are done; it is neither copyable nor movable.
class CpuWorld {
 public:
  explicit CpuWorld(int size);
  CpuWorld(const CpuWorld&) = delete;
  CpuWorld& operator=(const CpuWorld&) = delete;

  int size() const { return size_; }

  // Poisons the world (see the file comment): every rank waiting in a collective or a recv of it
  // wakes, and every later call throws, with GroupAborted carrying `reason` (say which rank failed
  // and why). The first reason wins; later calls change nothing. Any thread may call it.
  void abort(const std::string& reason);
  // The reason of the abort, or "" while the world is healthy.
  std::string abort_reason() const;

 private:
  friend class CpuCommunicator;

  enum class Op { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllGatherv, kBarrier, kAllToAllV };

  // What one rank publishes for the collective in flight.
  struct Slot {
    Op op = Op::kBarrier;
    const void* send = nullptr;  // all_reduce, all_gather, reduce_scatter; broadcast: data
    size_t count = 0;            // elements (reductions) or bytes (all_gather, broadcast)
    ReduceType type = ReduceType::kF32;
    int root = 0;
    std::span<const GatherItem> items;  // all_gatherv
    std::span<const AllToAllItem> exchanges;  // all_to_all_v
    std::string error;                  // this rank's own argument error, empty if none
  };

  // Messages to one rank, one FIFO per sender.
  struct Mailbox {
    std::mutex mutex;
    std::condition_variable cv;
    std::vector<std::deque<std::vector<std::byte>>> from;  // [size] sender -> queued messages
    bool aborted = false;                                  // set by CpuWorld::abort, under mutex
  };

  int size_;
  ThreadBarrier barrier_;
  std::vector<Slot> slots_;                          // [size]
  std::vector<std::unique_ptr<Mailbox>> mailboxes_;  // [size] by receiver
  mutable std::mutex abort_mutex_;
  std::string abort_reason_;  // under abort_mutex_; non-empty once aborted
};

class CpuCommunicator final : public Communicator {
 public:
  // `world` must outlive the communicator; exactly one communicator per rank.
  CpuCommunicator(CpuWorld& world, int rank);

  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }

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
  using Slot = CpuWorld::Slot;
  // Publishes `slot`, waits for every rank, and throws (on every rank alike, after a second
  // barrier) if any rank's arguments are bad or differ from rank 0's.
  // Throws GroupAborted if the world is aborted before every rank arrived.
  void begin(Slot slot);
  // The round's closing barrier: every rank passed begin(), so every rank comes; an abort meanwhile
  // does not stop it (a peer may still be reading this rank's buffers).
  void end() { world_.barrier_.arrive_and_wait(); }
  [[noreturn]] void throw_aborted(std::string_view call) const;
  std::string disagreement() const;
  // all_to_all_v's check: every rank passed as many items, and each pair's counts match.
  std::string exchange_disagreement() const;
  // out[i] = sum over ranks of (elements at slot.send + element_offset), in rank order.
  void sum_ranks(size_t element_offset, size_t count, ReduceType type, std::byte* out) const;

  CpuWorld& world_;
  int rank_;
  std::vector<std::byte> scratch_;  // reduction results until the closing barrier
};

}  // namespace tachyon::dist
