// Streams and events of two-batch overlap on CPU thread ranks (see tbo_stream.h).
#include "tachyon/runner/tbo_stream.h"

#include "tachyon/base/check.h"

namespace tachyon::runner {

void TboEvent::record() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    recorded_ = true;
  }
  cv_.notify_all();
}

void TboEvent::wait() const {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return recorded_; });
}

TboCommStream::TboCommStream() : thread_([this] { loop(); }) {}

TboCommStream::~TboCommStream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void TboCommStream::enqueue(std::function<void(bool failed)> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TACHYON_CHECK(!stop_) << "internal: work enqueued on a stopping TBO comm stream";
    queue_.push_back(std::move(work));
  }
  cv_.notify_all();
}

void TboCommStream::loop() {
  for (;;) {
    std::function<void(bool)> work;
    bool failed = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop, with nothing left to run
      work = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      failed = error_ != nullptr;
    }
    std::exception_ptr error;
    try {
      work(failed);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (error && !error_) error_ = error;
      busy_ = false;
    }
    cv_.notify_all();
  }
}

void TboCommStream::synchronize() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void TboCommStream::rethrow_if_failed() {
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

void TboComputeStream::enter(int mb) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return turn_ == mb; });
}

void TboComputeStream::yield(int mb) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (finished_[1 - mb]) return;  // alone on the stream: keep it
  turn_ = 1 - mb;
  cv_.notify_all();
  cv_.wait(lock, [&] { return turn_ == mb; });
}

void TboComputeStream::finish(int mb) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_[mb] = true;
    turn_ = 1 - mb;
  }
  cv_.notify_all();
}

}  // namespace tachyon::runner
