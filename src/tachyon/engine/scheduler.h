// Scheduler: token-budget continuous batching. Each step: running decodes first (they protect
// inter-token latency), then running chunked prefills, then waiting sequences, until the token
// budget (max_num_batched_tokens) or max_num_seqs is reached; prefill and decode share the step.
// When the KV cache runs out, the lowest-priority, latest-arrived running sequence is preempted
// by recompute (its blocks freed, its tokens kept). Each policy is a small named function.
// The scheduler owns no sequences (EngineCore does); it holds pointers to live ones only.
// Tests: tests/unit/test_scheduler.cpp (fake sampled tokens, no model).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <vector>

#include "tachyon/engine/kv_cache_manager.h"
#include "tachyon/engine/scheduler_config.h"
#include "tachyon/engine/sequence.h"
#include "tachyon/engine/step_plan.h"

namespace tachyon::engine {

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv_cache);

  const SchedulerConfig& config() const { return config_; }
  void add(Sequence* sequence);       // to the waiting queue
  // Removes the sequence wherever it is and frees its blocks; marks it finished (abort).
  void abort(Sequence* sequence);

  StepPlan schedule();
  // Applies one executed step: sampled[i] is the token for the i-th sampled sequence of the
  // plan. Returns the sequences that gained a token or finished, in plan order (finished ones
  // are no longer referenced by the scheduler; their blocks are freed).
  std::vector<Sequence*> update(const StepPlan& plan, std::span<const int32_t> sampled);

  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  const std::vector<Sequence*>& running() const { return running_; }

 private:
  struct WaitingOrder {
    bool by_priority;
    bool operator()(const Sequence* a, const Sequence* b) const;
  };

  int64_t tokens_to_schedule(const Sequence& sequence, int64_t budget) const;
  bool allocate_or_preempt(Sequence& sequence, int64_t num_new, StepPlan& plan);
  Sequence* pick_victim(Sequence& asking, const StepPlan& plan) const;
  void preempt(Sequence& sequence, StepPlan& plan);
  bool admit(Sequence& sequence, int64_t& budget, StepPlan& plan);
  void append_to_plan(Sequence& sequence, int64_t num_new, StepPlan& plan) const;
  void check_stop(Sequence& sequence);
  void finish(Sequence& sequence, FinishReason reason);
  void release_forks(Sequence& sequence);

  SchedulerConfig config_;
  KvCacheManager& kv_;
  std::vector<Sequence*> running_;
  std::set<Sequence*, WaitingOrder> waiting_;
};

}  // namespace tachyon::engine
