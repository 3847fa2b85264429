// Scheduler: token-budget continuous batching. Each step: running decodes first (they protect
// inter-token latency), then running chunked prefills, then waiting sequences, until the token
// budget (max_num_batched_tokens) or max_num_seqs is reached; prefill and decode share the step.
// When the KV cache runs out, the lowest-priority, latest-arrived running sequence is preempted
// by recompute (its blocks freed, its tokens kept). Each policy is a small named function.
// KV pools (data-parallel replicas, engine/kv_cache_manager.h): a waiting sequence starts in the
// pool caching its longest prefix, else the least busy one with room (pool_order), and stays
// there; a sequence short of blocks preempts only sequences of its own pool.
// The scheduler owns no sequences (EngineCore does); it holds pointers to live ones only.
// Draft tokens: a decoding sequence's draft_tokens run in the same step as its last known token,
// in lookahead slots the KV manager hands out; update() appends the runner's 1 + accepted tokens
// one at a time, exactly as that many plain steps would (stop checks and prefix caching after
// each), and gives back the slots of rejected drafts.
// Asynchronous scheduling: schedule() may run while the last plan is still being computed (not
// yet passed to update()). A sequence in that plan counts its tokens as scheduled and, when
// sampled there, one more token that the next plan decodes as a deferred token
// (core/step_plan.h); update() then applies the older plan. The engine never has more than one
// plan unapplied when it schedules.
// Policies (core/scheduler_config.h): FCFS and priority order the waiting queue; the fair policy
// (scheduler_fair.cpp, engine/fair_shares.h) orders prefill work and admission by each client's
// service and, before a step is planned, preempts for the client that waits first when another
// client holds more of the KV cache than it would.
// Tests: tests/unit/test_scheduler.cpp (fake sampled tokens, no model),
// tests/unit/test_scheduler_fair.cpp (clients' shares) and tests/unit/test_scheduler_drafts.cpp
// (a fake verifying runner over a fake KV cache).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <set>
#include <vector>

#include "tachyon/engine/fair_shares.h"
#include "tachyon/engine/kv_cache_manager.h"
#include "tachyon/core/scheduler_config.h"
#include "tachyon/engine/sequence.h"
#include "tachyon/core/step_output.h"
#include "tachyon/core/step_plan.h"

namespace tachyon::engine {

class Scheduler {
 public:
  Scheduler(const core::SchedulerConfig& config, KvCacheManager& kv_cache);

  const core::SchedulerConfig& config() const { return config_; }
  void add(Sequence* sequence);       // to the waiting queue
  // A sequence whose prompt's K/V someone else wrote into its block table (a prefill server's,
  // engine/kv_transfer.h), with the first token sampled there appended: it runs from that token
  // as if this scheduler had computed the prompt. False when that token already finishes it
  // (its blocks are then freed).
  bool add_imported(Sequence* sequence);
  // The KV pools (data-parallel replicas; one for a plain engine) a sequence may start in, best
  // first: the pool caching the longest prefix of it, then the one running the fewest sequences,
  // then the one with the most free blocks. admit() takes the first where it fits; an imported
  // prompt's blocks are allocated the same way (EngineCore::start_pending_imports).
  std::vector<int32_t> pool_order(const Sequence& sequence) const;
  // Removes the sequence wherever it is and frees its blocks; marks it finished (abort).
  void abort(Sequence* sequence);

  core::StepPlan schedule();
  // Applies one executed step: output.sequences[i] holds the tokens of the i-th sampled
  // sequence of the plan (1 + accepted drafts). Tokens after one that finishes its sequence are
  // dropped from `output`, so afterwards it holds exactly what was appended: no tokens at all for
  // a sequence aborted or preempted since the plan was made. Returns the
  // sequences that gained a token or finished, in plan order (finished ones are no longer
  // referenced by the scheduler; their blocks are freed).
  std::vector<Sequence*> update(const core::StepPlan& plan, core::StepOutput& output);
  // The same for a plan without drafts: sampled[i] is the token of the i-th sampled sequence.
  std::vector<Sequence*> update(const core::StepPlan& plan, std::span<const int32_t> sampled);

  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  const std::vector<Sequence*>& running() const { return running_; }
  // Clients the fair policy keeps a share for (those with a sequence waiting or running); 0 under
  // the other policies.
  size_t num_fair_clients() const { return shares_.num_clients(); }

 private:
  struct WaitingOrder {
    bool by_priority;
    bool operator()(const Sequence* a, const Sequence* b) const;
  };

  bool fair() const { return config_.policy == core::SchedulingPolicy::kFair; }
  // Whether SamplingParams::priority orders sequences: under the priority policy, and under the
  // fair one within a client (and between equally served clients).
  bool by_priority() const { return config_.policy != core::SchedulingPolicy::kFcfs; }
  int32_t pool_of(const Sequence& sequence) const;
  bool can_plan_ahead(const Sequence& sequence) const;
  void schedule_running(Sequence& sequence, int64_t& budget, core::StepPlan& plan);
  int64_t tokens_to_schedule(const Sequence& sequence, int64_t budget) const;
  int64_t drafts_to_schedule(const Sequence& sequence, int64_t budget) const;
  void apply_output(Sequence& sequence, const core::ScheduledSequence& entry, core::SequenceOutput& out);
  void commit_computed(Sequence& sequence, int64_t num_computed);
  bool allocate_or_preempt(Sequence& sequence, int64_t num_new, core::StepPlan& plan);
  Sequence* pick_victim(Sequence& asking, const core::StepPlan& plan) const;
  Sequence* pick_fcfs_victim(Sequence& asking, const core::StepPlan& plan) const;
  static bool planned(const Sequence& sequence, const core::StepPlan& plan);
  void preempt(Sequence& sequence, core::StepPlan& plan);
  bool admit(Sequence& sequence, int64_t& budget, core::StepPlan& plan);
  void append_to_plan(Sequence& sequence, int64_t num_new, core::StepPlan& plan, int64_t num_drafts = 0);
  void check_stop(Sequence& sequence);
  void finish(Sequence& sequence, FinishReason reason);
  void release_forks(Sequence& sequence);

  // The fair policy (scheduler_fair.cpp).
  void start_fair_step(core::StepPlan& plan);
  Sequence* next_fair_waiting() const;
  void make_room_for(Sequence& head, core::StepPlan& plan);
  void schedule_fair_prefills(const std::vector<Sequence*>& prefills, int64_t& budget, size_t num_rebalanced,
                              core::StepPlan& plan);
  Sequence* pick_fair_victim(Sequence& asking, const core::StepPlan& plan) const;
  Sequence* yielding_sequence(int32_t pool, const FairShares::Client& asker, int64_t asker_more,
                              const core::StepPlan& plan) const;

  core::SchedulerConfig config_;
  KvCacheManager& kv_;
  std::vector<Sequence*> running_;
  std::set<Sequence*, WaitingOrder> waiting_;
  int64_t num_sampled_in_plan_ = 0;  // sampled sequences appended to the plan being built
  FairShares shares_;                // the fair policy's service per client
  uint64_t fair_pass_ = 0;           // the last pass's FairShare::stamp
};

}  // namespace tachyon::engine
