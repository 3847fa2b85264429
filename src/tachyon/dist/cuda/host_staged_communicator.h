// HostStagedCommunicator: a Communicator for CUDA ranks that share one GPU, so that the CUDA
// multi-rank code paths (the tensor-parallel runner's shards, all-reduces and logits gather) run
// and are checked on a machine with one GPU. Each call copies the rank's device bytes to host
// memory on the rank's stream (after the work that wrote them) and waits for the copy, runs the
// CPU backend's collective there, and copies the result back to the device before it returns.
// The one non-obvious decision: the ranks meet on the host, never inside a kernel. A peer or NCCL
// kernel spins on the GPU until every rank has arrived; with ranks queued on one GPU (one
// hardware queue may serve several streams) the spinning kernel can sit in front of the very
// work its peer must finish first, and the group hangs. Here a rank's thread waits in a host
// barrier while its GPU work is already done, so any number of ranks can share a device.
// The price: every call synchronizes its stream, and a stream being captured into a CUDA graph
// cannot be synchronized, so a call on one throws naming the reason (the runner must be eager).
// Results are the CPU backend's: ranks summed 0..n-1 in order, every rank the same bits.
// Not for production: it copies through host memory. Tests: tests/gpu/test_host_staged_communicator.cpp,
// tests/gpu/test_tp_cuda_runner.cpp (the shared-GPU cases).
#pragma once

#include <memory>
#include <string>

#include "tachyon/dist/communicator.h"
#include "tachyon/dist/cpu_communicator.h"

namespace tachyon::dist {

// What the ranks of one group share. Build it before the rank threads start and keep it alive
// until they are done; each rank thread then calls join(rank) once, with its device current.
class HostStagedGroup {
 public:
  explicit HostStagedGroup(int size) : world_(size) {}
  HostStagedGroup(const HostStagedGroup&) = delete;
  HostStagedGroup& operator=(const HostStagedGroup&) = delete;

  int size() const { return world_.size(); }
  std::unique_ptr<Communicator> join(int rank);
  // A rank failed outside a collective: every rank waiting in one of this group's calls wakes and
  // throws GroupAborted naming `reason`, and so does every later call (CpuWorld::abort).
  void abort(const std::string& reason) { world_.abort(reason); }

 private:
  CpuWorld world_;
};

}  // namespace tachyon::dist
