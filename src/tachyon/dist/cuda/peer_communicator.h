// PeerCommunicator: a Communicator (communicator.h) whose small all-reduces and all-gathers run
// as one kernel over CUDA peer memory, for the GPUs of one group that live in this process
// (DESIGN: one process per node, one worker thread per GPU). After cudaDeviceEnablePeerAccess a
// kernel on GPU a reads GPU b's memory directly, so a decode step's [batch, hidden] all-reduce is
// one launch with no NCCL protocol around it. Everything else goes to a fallback Communicator
// (NCCL in production): other ops, integer sums, and messages larger than the world's buffer.
//
// PeerWorld holds what the ranks share: per rank a staging buffer and a small sync region on the
// rank's device, and a host barrier. Build it on one thread before the rank threads start, keep
// it alive until they are done; then each rank thread, with its device current, builds its
// PeerCommunicator(world, rank, fallback). devices may repeat: several ranks then share a GPU
// (the tests run every world size on one GPU that way); their streams must be non-blocking and
// their kernels co-resident (peer_collectives.cu says why and how the grid is capped).
//
// Results are bit-identical to CpuCommunicator's: every rank sums ranks 0..n-1 in that order in
// f32 and rounds once, one-shot and two-shot alike (peer_collectives.cu). They may differ in the
// last bits from NCCL's (other order), so every rank of a group must take the same path for the
// same call; the path depends only on sizes all ranks agree on (dist/peer_plan.h).
//
// Contract beyond communicator.h:
//   - Calls of one rank are ordered on one stream (or streams joined by events): a launch may
//     overwrite the staging buffer only after the previous one finished (peer_collectives.cu).
//   - A rank's argument errors throw on that rank only, before anything is enqueued (as NCCL's);
//     arguments that differ between ranks hang the group (a world built with a hang timeout
//     turns that into a kernel trap).
//   - With fallback == nullptr every size is served (in buffer-sized chunks) and the other ops
//     throw tachyon::Error saying they need NCCL. barrier() is this world's host rendezvous and
//     never touches the fallback.
// Multicast (NVLS) is never used: plain loads and stores over peer pointers only.
// Tests: tests/gpu/test_peer_communicator.cpp (GPU), tests/unit/test_peer_plan.cpp (the plan).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "tachyon/dist/communicator.h"
#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/dist/cuda/peer_collectives.h"
#include "tachyon/dist/peer_plan.h"

namespace tachyon::dist {

class PeerWorld {
 public:
  // Rank r runs on CUDA device devices[r] (1 to kPeerMaxRanks ranks). Enables peer access between
  // every pair of distinct devices (left on at destruction: it is process-wide and others, NCCL
  // included, may rely on it), allocates buffer_bytes of staging (a multiple of 16) and the sync
  // region on each rank's device, and zeroes the sync region. hang_timeout_s > 0 makes a barrier
  // that waits longer trap its kernel (tests); 0 waits forever, as NCCL's kernels do.
  explicit PeerWorld(std::vector<int> devices, size_t buffer_bytes = size_t{8} << 20, double hang_timeout_s = 0);
  ~PeerWorld();
  PeerWorld(const PeerWorld&) = delete;
  PeerWorld& operator=(const PeerWorld&) = delete;

  // True when every pair of distinct devices can access each other's memory (cudaDeviceCanAccessPeer
  // both ways) and the list is 1 to kPeerMaxRanks valid devices. Repeated devices need nothing.
  static bool supported(const std::vector<int>& devices);

  int size() const { return view_.ranks; }
  int device(int rank) const { return devices_.at(rank); }
  size_t buffer_bytes() const { return view_.capacity; }  // per rank: the largest chunk
  int max_blocks() const { return view_.max_blocks; }     // grid cap of one launch

 private:
  friend class PeerCommunicator;

  struct Allocation {
    int device = 0;
    void* pointer = nullptr;
  };
  void free_allocations() noexcept;

  std::vector<int> devices_;
  std::vector<Allocation> allocations_;  // one per rank: [buffer_bytes] data, then the sync region
  PeerDeviceView view_;
  ThreadBarrier barrier_;
};

class PeerCommunicator final : public Communicator {
 public:
  using Path = PeerPath;  // kOneShot, kTwoShot, kFallback

  // On rank's thread with world.device(rank) current. `fallback` (may be null) must be a
  // communicator of the same ranks (same rank and size) and outlive this one.
  PeerCommunicator(PeerWorld& world, int rank, Communicator* fallback = nullptr);
  // The same, owning its fallback (the TP runner's NCCL communicator lives as long as this).
  PeerCommunicator(PeerWorld& world, int rank, std::unique_ptr<Communicator> fallback);

  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }

  // Peer path for kF32, kBF16, kF16 when the message fits the buffer (or always, without a
  // fallback); ints and larger messages go to the fallback.
  void all_reduce(const void* send, void* recv, size_t count, ReduceType type, void* stream) override;
  // Peer path when this rank's bytes fit the buffer (or always, without a fallback).
  void all_gather(const void* send, void* recv, size_t bytes, void* stream) override;
  // Fallback only.
  void reduce_scatter(const void* send, void* recv, size_t count, ReduceType type, void* stream) override;
  void broadcast(void* data, size_t bytes, int root, void* stream) override;
  void all_gatherv(std::span<const GatherItem> items, void* stream) override;
  // Not built: throws NotImplementedOnBackend (expert-parallel dispatch runs on CPU ranks).
  void all_to_all_v(std::span<const AllToAllItem> items, void* stream) override;
  void send(const void* data, size_t bytes, int peer, void* stream) override;
  void recv(void* data, size_t bytes, int peer, void* stream) override;
  void send_recv(const void* send_data, size_t send_bytes, int dst, void* recv_data, size_t recv_bytes, int src,
                 void* stream) override;
  // Host rendezvous of the world's ranks; orders no stream.
  void barrier() override;

  // The path the last all_reduce or all_gather took (for a chunked message: its first chunk's);
  // kFallback before the first one.
  Path last_path() const { return last_path_; }

 private:
  // The fallback, or a tachyon::Error saying that `op` needs NCCL.
  Communicator& fallback(std::string_view op) const;
  // Throws unless the current device is this rank's and the buffers are usable.
  void check_call(std::string_view op, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                  bool in_place) const;

  PeerWorld& world_;
  int rank_;
  std::unique_ptr<Communicator> owned_fallback_;  // set by the owning constructor only
  Communicator* fallback_;
  Path last_path_ = Path::kFallback;
};

}  // namespace tachyon::dist
