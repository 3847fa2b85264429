#include "tachyon/runner/rank_workers.h"

#include "tachyon/base/check.h"

namespace tachyon::runner {

RankWorkers::RankWorkers(int num_ranks) : errors_(static_cast<size_t>(num_ranks)) {
  TACHYON_CHECK(num_ranks >= 1) << "RankWorkers needs at least one rank, got " << num_ranks;
  threads_.reserve(static_cast<size_t>(num_ranks));
  for (int r = 0; r < num_ranks; ++r) threads_.emplace_back([this, r] { worker(r); });
}

RankWorkers::~RankWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void RankWorkers::worker(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task = nullptr;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      task = task_;
    }
    std::exception_ptr error;
    try {
      (*task)(rank);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      errors_[static_cast<size_t>(rank)] = error;
      ++done_;
    }
    done_cv_.notify_one();
  }
}

void RankWorkers::run(const std::function<void(int rank)>& task) {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    task_ = &task;
    done_ = 0;
    ++generation_;
    work_cv_.notify_all();
    done_cv_.wait(lock, [&] { return done_ == size(); });
    task_ = nullptr;
  }
  for (const std::exception_ptr& error : errors_) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace tachyon::runner
