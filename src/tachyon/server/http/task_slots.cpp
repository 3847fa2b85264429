#include "tachyon/server/http/task_slots.h"

#include "tachyon/base/check.h"

namespace tachyon::server {

TaskSlots::TaskSlots(int64_t limit) : limit_(limit) { TACHYON_CHECK(limit > 0) << "a bound of " << limit << " slots"; }

TaskSlots::~TaskSlots() {
  close();
  wait_all();
}

TaskSlots::Slot TaskSlots::try_take() {
  {
    std::lock_guard lock(mutex_);
    if (closing_ || taken_ >= limit_) return nullptr;
    ++taken_;
  }
  // A handle whose deleter gives the slot back (it points at the pool only to be non-null): a
  // shared_ptr, so that the work may pass its slot on (a router's exchange hands it to the relay
  // that outlives its thread).
  return Slot(static_cast<void*>(this), [this](void*) { give_back(); });
}

void TaskSlots::give_back() {
  std::lock_guard lock(mutex_);
  --taken_;
  returned_.notify_all();
}

void TaskSlots::close() {
  std::lock_guard lock(mutex_);
  closing_ = true;
}

void TaskSlots::wait_all() {
  std::unique_lock lock(mutex_);
  returned_.wait(lock, [this] { return taken_ == 0; });
}

int64_t TaskSlots::taken() const {
  std::lock_guard lock(mutex_);
  return taken_;
}

}  // namespace tachyon::server
