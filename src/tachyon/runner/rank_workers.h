// RankWorkers: one thread per tensor-parallel rank, driven by the engine thread. run(task)
// hands task(rank) to every worker at once and returns when all have finished; an exception
// thrown on a worker is rethrown on the caller (the lowest rank's first). A rank's thread lives
// as long as the object, so per-thread state (the current CUDA device, an NCCL communicator that
// must be used from one thread) stays with one thread from construction to destruction: build
// and destroy rank state inside run() too.
// Caveat: a rank that throws outside a collective leaves its peers waiting inside the next
// collective; run() then never returns. Errors a collective raises on every rank are safe.
// Used by TpCpuModelRunner and TpCudaModelRunner. Tests: tests/unit/test_rank_workers.cpp.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tachyon::runner {

class RankWorkers {
 public:
  explicit RankWorkers(int num_ranks);
  ~RankWorkers();
  RankWorkers(const RankWorkers&) = delete;
  RankWorkers& operator=(const RankWorkers&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  // Runs task(r) on rank r's thread for every r, concurrently; blocks until all return.
  void run(const std::function<void(int rank)>& task);

 private:
  void worker(int rank);

  std::vector<std::thread> threads_;
  std::vector<std::exception_ptr> errors_;
  std::mutex mutex_;
  std::condition_variable work_cv_;  // caller -> workers: a new generation or stop
  std::condition_variable done_cv_;  // workers -> caller: one more rank finished
  const std::function<void(int)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int done_ = 0;
  bool stop_ = false;
};

}  // namespace tachyon::runner
