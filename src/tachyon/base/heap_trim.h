// Giving freed heap memory back to the system when a server goes idle. glibc keeps the chunks a
// process frees (in its arenas, and in holes between live chunks) for reuse, so a server's
// resident memory after a burst of requests stays at the burst's high-water mark and creeps up
// as the holes shift (the PD soak: the decode server +2% over 20,000 requests, with 67 KB of its
// own still allocated at the end under heaptrack). malloc_trim(0) returns the free pages at the
// heap's top and, inside it, every whole free page (madvise), so an idle server's RSS is what it
// holds. It walks the heap under the arena lock (about a millisecond for a 70 MB heap), so it
// runs only on a transition to idle and at most once a second.
// Test: tests/unit/test_heap_trim.cpp; the effect: tests/server/pd_soak.py.
#pragma once

#include <atomic>
#include <chrono>

namespace tachyon {

class IdleHeapTrim {
 public:
  explicit IdleHeapTrim(std::chrono::milliseconds min_interval = std::chrono::seconds(1))
      : min_interval_(min_interval) {}
  void busy() { busy_since_trim_.store(true, std::memory_order_relaxed); }
  // Trims when there was work since the last trim and the last trim is min_interval old; returns
  // whether it trimmed.
  bool idle();

 private:
  const std::chrono::milliseconds min_interval_;
  std::atomic<bool> busy_since_trim_{false};
  std::chrono::steady_clock::time_point last_trim_{};
};

}  // namespace tachyon
