#include "tachyon/base/heap_trim.h"

#include <malloc.h>

namespace tachyon {

bool IdleHeapTrim::idle() {
  if (!busy_since_trim_.load(std::memory_order_relaxed)) return false;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_trim_ < min_interval_) return false;
  busy_since_trim_.store(false, std::memory_order_relaxed);
  last_trim_ = now;
  malloc_trim(0);
  return true;
}

}  // namespace tachyon
