// TaskSlots: a bound on work that waits on another server off the HTTP workers (a decode
// server's KV pulls, http/pd_roles.h; a router's requests, http/pd_router.h). Each such piece of
// work takes a slot first and holds it until it ends, wherever it ends (a thread of its own, or
// a relayed body that outlives that thread); past `limit` slots the caller answers 503 with
// Retry-After at once, instead of queueing work behind work that is waiting. Why not a thread
// pool: the work mostly waits on a socket, so a pool's size would be the bound on waiting
// requests and a full pool would queue the rest out of sight; a slot makes the bound visible and
// its refusal immediate. close() refuses new slots and raises closing(), which work that may wait
// long reads to end early; wait_all() returns once every slot is back.
// Tests: tests/server/pd_serve_busy.py (pulls), tests/server/pd_router_busy.py (router).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

namespace tachyon::server {

class TaskSlots {
 public:
  // Held while the work runs; the slot goes back when the last copy goes (from any thread).
  using Slot = std::shared_ptr<void>;

  explicit TaskSlots(int64_t limit);
  ~TaskSlots();  // waits for every slot: a slot that outlives its pool would return into nothing
  TaskSlots(const TaskSlots&) = delete;
  TaskSlots& operator=(const TaskSlots&) = delete;

  Slot try_take();  // null: `limit` slots are taken, or close() ran
  void close();     // any thread; no new slots from now on
  void wait_all();  // returns once every slot taken is back
  const std::atomic<bool>& closing() const { return closing_; }
  int64_t taken() const;
  int64_t limit() const { return limit_; }

 private:
  void give_back();

  const int64_t limit_;
  std::atomic<bool> closing_{false};
  mutable std::mutex mutex_;
  std::condition_variable returned_;
  int64_t taken_ = 0;
};

}  // namespace tachyon::server
