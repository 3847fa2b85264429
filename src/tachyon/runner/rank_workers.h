// RankWorkers: one thread per tensor-parallel rank, driven by the engine thread. run(task)
// hands task(rank) to every worker at once and returns when all have finished; an exception
// thrown on a worker is rethrown on the caller (the first to fail, in time: the cause). A rank's
// thread lives as long as the object, so per-thread state (the current CUDA device, an NCCL
// communicator that must be used from one thread) stays with one thread from construction to
// destruction: build and destroy rank state inside run() too.
// A rank that throws outside a collective never reaches the next one, where its peers wait for
// it: on_failure, called on the failing rank's thread before it reports done, must wake them (the
// CPU runners abort their worlds, dist::CpuWorld::abort, so the peers throw dist::GroupAborted
// naming the failed rank and run() returns). Without on_failure (the CUDA TP runner, whose NCCL
// collectives cannot be woken from here yet) such a failure leaves run() waiting for ever.
// Used by TpCpuModelRunner, DpCpuModelRunner, PcpCpuModelRunner and TpCudaModelRunner.
// Tests: tests/unit/test_rank_workers.cpp.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tachyon::runner {

// Called with "rank <r> of <n> failed: <what()>" when a rank's task throws.
using RankFailureHandler = std::function<void(const std::string& reason)>;

class RankWorkers {
 public:
  explicit RankWorkers(int num_ranks, RankFailureHandler on_failure = {});
  ~RankWorkers();
  RankWorkers(const RankWorkers&) = delete;
  RankWorkers& operator=(const RankWorkers&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  // Runs task(r) on rank r's thread for every r, concurrently; blocks until all return.
  void run(const std::function<void(int rank)>& task);

  // Test hook: in the next run(), rank `rank` throws tachyon::Error instead of running its task,
  // as a rank failing outside a collective does (its peers run theirs and wait for it).
  void fail_next_run_for_test(int rank);

 private:
  void worker(int rank);

  RankFailureHandler on_failure_;
  std::vector<std::thread> threads_;
  std::vector<std::exception_ptr> errors_;
  std::mutex mutex_;
  std::condition_variable work_cv_;  // caller -> workers: a new generation or stop
  std::condition_variable done_cv_;  // workers -> caller: one more rank finished
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int done_ = 0;
  int first_failed_ = -1;  // the rank whose exception of this run came first, or -1
  int fail_for_test_ = -1;
  bool stop_ = false;
};

}  // namespace tachyon::runner
