#include "tachyon/runner/rank_workers.h"

#include "tachyon/base/check.h"

namespace tachyon::runner {
namespace {

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

}  // namespace

RankWorkers::RankWorkers(int num_ranks, RankFailureHandler on_failure)
    : on_failure_(std::move(on_failure)), errors_(static_cast<size_t>(num_ranks)) {
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

void RankWorkers::fail_next_run_for_test(int rank) {
  TACHYON_CHECK(rank >= 0 && rank < size()) << "fail_next_run_for_test: rank " << rank << " of " << size();
  std::lock_guard<std::mutex> lock(mutex_);
  fail_for_test_ = rank;
}

void RankWorkers::worker(int rank) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* task = nullptr;
    bool fail = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      task = task_;
      fail = fail_for_test_ == rank;
    }
    std::exception_ptr error;
    try {
      if (fail) TACHYON_FAIL() << "rank " << rank << ": a failure injected by a test, outside any collective";
      (*task)(rank);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      errors_[static_cast<size_t>(rank)] = error;
      if (error && first_failed_ < 0) first_failed_ = rank;  // before on_failure wakes the peers
    }
    // Before this rank reports done: its peers may wait for it in a collective it never reaches.
    if (error && on_failure_) {
      on_failure_("rank " + std::to_string(rank) + " of " + std::to_string(size()) + " failed: " + message_of(error));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++done_;
    }
    done_cv_.notify_one();
  }
}

void RankWorkers::run(const std::function<void(int rank)>& task) {
  int first_failed = -1;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    task_ = &task;
    done_ = 0;
    first_failed_ = -1;
    ++generation_;
    work_cv_.notify_all();
    done_cv_.wait(lock, [&] { return done_ == size(); });
    task_ = nullptr;
    fail_for_test_ = -1;
    first_failed = first_failed_;
  }
  if (first_failed >= 0) std::rethrow_exception(errors_[static_cast<size_t>(first_failed)]);
}

}  // namespace tachyon::runner
