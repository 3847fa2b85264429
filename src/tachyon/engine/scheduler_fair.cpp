// The fair scheduling policy (core/scheduler_config.h SchedulingPolicy::kFair): the Scheduler's
// member functions that only it uses. Service per client: engine/fair_shares.h.
#include <algorithm>

#include "tachyon/engine/scheduler.h"

namespace tachyon::engine {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

// Enters the clients with work, then makes room (KV blocks, a running slot) for the sequence that
// waits first.
void Scheduler::start_fair_step(core::StepPlan& plan) {
  std::vector<const Sequence*> live(running_.begin(), running_.end());
  live.insert(live.end(), waiting_.begin(), waiting_.end());
  shares_.refresh(live);
  if (Sequence* head = next_fair_waiting()) make_room_for(*head, plan);
}

// The waiting sequence of the client with the least service; the earliest of its sequences, and
// of the earliest client among equals.
Sequence* Scheduler::next_fair_waiting() const {
  Sequence* head = nullptr;
  int64_t least = 0;
  for (Sequence* s : waiting_) {  // in arrival order
    const int64_t service = shares_.service(*s);
    if (head == nullptr || service < least) {
      head = s;
      least = service;
    }
  }
  return head;
}

// KV blocks each client's running sequences hold in one pool (a block shared by two sequences
// counts for both: what preempting either would take from its client).
std::map<FairShares::Client, int64_t> Scheduler::blocks_by_client(int32_t pool) const {
  std::map<FairShares::Client, int64_t> held;
  for (const Sequence* s : running_) {
    if (pool_of(*s) == pool) held[FairShares::client_of(*s)] += static_cast<int64_t>(s->block_table.size());
  }
  return held;
}

// Preempts, while the pool lacks the blocks that `head`'s first chunk and the running decodes'
// next tokens need (or max_num_seqs sequences run), a sequence of a client that holds more than
// head's client will once admitted (prefix hits included): yielding_sequence's.
void Scheduler::make_room_for(Sequence& head, core::StepPlan& plan) {
  const int32_t block_size = kv_.block_size();
  extend_block_hashes(head.block_hashes, head.tokens, block_size);
  const int32_t pool = pool_order(head).front();
  const int64_t hit_blocks = static_cast<int64_t>(kv_.cached_prefix(head.block_hashes, head.num_tokens(), pool).size());
  const int64_t hit_tokens = hit_blocks * block_size;
  int64_t chunk = head.num_tokens() - hit_tokens;
  if (chunk > config_.max_num_batched_tokens) {
    if (!config_.enable_chunked_prefill) return;
    chunk = config_.max_num_batched_tokens;
  }
  const int64_t head_table = ceil_div(hit_tokens + chunk, block_size);
  const FairShares::Client asker = FairShares::client_of(head);
  for (;;) {
    int64_t wanted = head_table - hit_blocks;
    for (const Sequence* s : running_) {
      if (pool_of(*s) != pool || !s->decoding()) continue;
      wanted += std::max<int64_t>(
          0, ceil_div(s->num_scheduled_tokens() + 1, block_size) - static_cast<int64_t>(s->block_table.size()));
    }
    if (kv_.num_free_blocks(pool) >= wanted && num_running() < config_.max_num_seqs) return;
    Sequence* victim = yielding_sequence(pool, asker, head_table, plan);
    if (victim == nullptr) return;
    preempt(*victim, plan);
  }
}

// Running chunked prefills and waiting sequences, a client at a time: the one with the least
// service goes next (its running prefills before its waiting sequences; among equal clients, one
// whose next sequence waits, then the one whose next sequence arrived first), and every token planned is charged to it, so a client
// with one long prompt or many prompts shares the budget with one that sends a short one. Waiting
// sequences are admitted while nothing was preempted for room (the fair preemptions of
// start_fair_step aside) and none is refused for lack of blocks: later ones do not overtake it.
// A sequence preempted in this step is not admitted again in it.
void Scheduler::schedule_fair_prefills(const std::vector<Sequence*>& prefills, int64_t& budget, size_t num_rebalanced,
                                       core::StepPlan& plan) {
  struct Work {
    std::vector<Sequence*> running, waiting;
    size_t next_running = 0, next_waiting = 0;
  };
  std::map<FairShares::Client, Work> work;
  for (Sequence* s : prefills) work[FairShares::client_of(*s)].running.push_back(s);
  for (Sequence* s : waiting_) {
    if (std::find(plan.preempted.begin(), plan.preempted.end(), s->id) != plan.preempted.end()) continue;
    work[FairShares::client_of(*s)].waiting.push_back(s);
  }
  // Among clients of equal service (a newcomer enters level with the least served), one that has
  // not started goes first: it has been waiting while the other was served.
  const WaitingOrder earlier{false};
  auto goes_before = [&](int64_t service, bool started, const Sequence* next, int64_t best_service,
                         bool best_started, const Sequence* best_next) {
    if (service != best_service) return service < best_service;
    if (started != best_started) return !started;
    return earlier(next, best_next);
  };
  bool admitting = true;
  while (budget > 0) {
    admitting = admitting && plan.preempted.size() == num_rebalanced && num_running() < config_.max_num_seqs;
    Work* best = nullptr;
    Sequence* best_next = nullptr;
    int64_t best_service = 0;
    bool best_started = false;
    for (auto& [client, w] : work) {
      const bool started = w.next_running < w.running.size();
      Sequence* next = started ? w.running[w.next_running]
                       : admitting && w.next_waiting < w.waiting.size() ? w.waiting[w.next_waiting]
                                                                        : nullptr;
      if (next == nullptr) continue;
      const int64_t service = shares_.service(client);
      if (best == nullptr || goes_before(service, started, next, best_service, best_started, best_next)) {
        best = &w;
        best_next = next;
        best_service = service;
        best_started = started;
      }
    }
    if (best == nullptr) break;
    if (best->next_running < best->running.size()) {
      ++best->next_running;
      schedule_running(*best_next, budget, plan);
    } else {
      ++best->next_waiting;
      if (!admit(*best_next, budget, plan)) admitting = false;
    }
  }
}

// The latest sequence, not yet planned in this step, of the client holding the most blocks in
// `pool` among those (other than `asker`) that would still hold at least as many as `asker`
// holds plus `asker_more` without it; null when no client would. The bound is what keeps the
// preemptions for fairness from going round: the client that yields never ends up smaller than
// the one it yields to, so the two cannot take the cache from each other in turn, and a client's
// only sequence is never preempted for another's smaller one.
Sequence* Scheduler::yielding_sequence(int32_t pool, const FairShares::Client& asker, int64_t asker_more,
                                       const core::StepPlan& plan) const {
  const std::map<FairShares::Client, int64_t> held = blocks_by_client(pool);
  const auto asker_it = held.find(asker);
  const int64_t asker_blocks = (asker_it == held.end() ? 0 : asker_it->second) + asker_more;
  const WaitingOrder later{false};
  Sequence* victim = nullptr;
  int64_t victim_held = 0;
  for (const auto& [client, blocks] : held) {
    if (client == asker || (victim != nullptr && blocks <= victim_held)) continue;
    Sequence* latest = nullptr;
    for (Sequence* s : running_) {
      if (pool_of(*s) != pool || FairShares::client_of(*s) != client || planned(*s, plan)) continue;
      if (latest == nullptr || later(latest, s)) latest = s;
    }
    if (latest != nullptr && blocks - static_cast<int64_t>(latest->block_table.size()) >= asker_blocks) {
      victim = latest;
      victim_held = blocks;
    }
  }
  return victim;
}

// Room for a running sequence's next tokens: from a client that holds more than its own (above),
// else as FCFS takes it (the latest arrival not yet planned, or the asking sequence itself), so
// that the oldest sequences always progress and every sequence finishes.
Sequence* Scheduler::pick_fair_victim(Sequence& asking, const core::StepPlan& plan) const {
  if (Sequence* victim = yielding_sequence(pool_of(asking), FairShares::client_of(asking), 0, plan)) return victim;
  return pick_fcfs_victim(asking, plan);
}

}  // namespace tachyon::engine
