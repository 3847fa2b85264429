// The fair scheduling policy (core/scheduler_config.h SchedulingPolicy::kFair): the Scheduler's
// member functions that only it uses. Service per client: engine/fair_shares.h. Per step the work
// is linear in the running sequences, plus one pass over the waiting ones only when a waiting
// sequence could start (a running slot, budget and a free block) or needs room made for it.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "tachyon/base/check.h"
#include "tachyon/engine/scheduler.h"

namespace tachyon::engine {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool preempted_in(const core::StepPlan& plan, const Sequence& sequence) {
  return std::find(plan.preempted.begin(), plan.preempted.end(), sequence.id) != plan.preempted.end();
}

}  // namespace

// Makes room (KV blocks, a running slot) for the sequence that waits first, when there is none.
void Scheduler::start_fair_step(core::StepPlan& plan) {
  if (waiting_.empty()) return;
  // Room for any first chunk and every running sequence's next block in every pool: nothing to make.
  const int64_t chunk_blocks = ceil_div(config_.max_num_batched_tokens, kv_.block_size());
  bool roomy = num_running() < config_.max_num_seqs;
  for (int32_t pool = 0; roomy && pool < kv_.num_pools(); ++pool) {
    roomy = kv_.num_free_blocks(pool) >= chunk_blocks + num_running();
  }
  if (roomy) return;
  // A client can yield only a sequence beside others of its own (yielding_sequence's bound):
  // when none has two, no room can be made, and the waiting ones need not be looked at.
  const uint64_t stamp = ++fair_pass_;  // marks each running client's share once
  bool some_client_has_two = false;
  for (const Sequence* s : running_) {
    some_client_has_two = some_client_has_two || s->fair_share->stamp == stamp;
    s->fair_share->stamp = stamp;
  }
  if (!some_client_has_two) return;
  if (Sequence* head = next_fair_waiting()) make_room_for(*head, plan);
}

// The waiting sequence of the client with the least service; the first of its sequences in the
// waiting order (priority, then arrival), and of the first client among equals.
Sequence* Scheduler::next_fair_waiting() const {
  Sequence* head = nullptr;
  int64_t least = 0;
  for (Sequence* s : waiting_) {  // in the waiting order
    const int64_t service = FairShares::service(*s);
    if (head == nullptr || service < least) {
      head = s;
      least = service;
    }
  }
  return head;
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
// service goes next (its running prefills before its waiting sequences, those by priority, then
// arrival; among equal clients, one whose next sequence waits, then the one whose next sequence
// comes first in that order), and every token
// planned is charged to it, so a client with one long prompt or many prompts shares the budget
// with one that sends a short one. Waiting sequences are admitted while nothing was preempted for
// room (the fair preemptions of start_fair_step aside) and none is refused for lack of blocks:
// later ones do not overtake it. A sequence preempted in this step is not admitted again in it.
void Scheduler::schedule_fair_prefills(const std::vector<Sequence*>& prefills, int64_t& budget, size_t num_rebalanced,
                                       core::StepPlan& plan) {
  using Waiting = decltype(waiting_);
  struct Work {
    FairShare* share;  // the client's
    std::vector<Sequence*> running;
    size_t next_running = 0;
    Waiting::iterator next_waiting;  // its earliest waiting sequence not tried yet; end(): none
  };
  // Grouped by client through the shares' scratch stamp: no lookup per sequence.
  const uint64_t stamp = ++fair_pass_;
  std::vector<Work> work;
  auto work_of = [&](const Sequence& s) -> Work& {
    FairShare* share = s.fair_share;
    TACHYON_CHECK(share != nullptr) << "internal: sequence " << s.id << " has no fair share";
    if (share->stamp != stamp) {
      share->stamp = stamp;
      share->slot = work.size();
      work.push_back({share, {}, 0, waiting_.end()});
    }
    return work[share->slot];
  };
  for (Sequence* s : prefills) work_of(*s).running.push_back(s);
  bool admitting = plan.preempted.size() == num_rebalanced && num_running() < config_.max_num_seqs &&
                   kv_.num_free_blocks() > 0;
  if (admitting) {  // each client's first waiting sequence: one pass, in the waiting order
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      if (preempted_in(plan, **it)) continue;
      Work& w = work_of(**it);
      if (w.next_waiting == waiting_.end()) w.next_waiting = it;
    }
  }
  // The client's next waiting sequence after `from` (the one just tried, still in waiting_).
  auto advance = [&](Work& w, Waiting::iterator from) {
    auto it = std::next(from);
    while (it != waiting_.end() && ((*it)->fair_share != w.share || preempted_in(plan, **it))) ++it;
    return it;
  };
  // Among clients of equal service (a newcomer enters level with the least served), one that has
  // not started goes first: it has been waiting while the other was served; then the waiting order.
  const WaitingOrder earlier = waiting_.key_comp();
  while (budget > 0) {
    admitting = admitting && plan.preempted.size() == num_rebalanced && num_running() < config_.max_num_seqs;
    Work* best = nullptr;
    Sequence* best_next = nullptr;
    int64_t best_service = 0;
    bool best_started = false;
    for (Work& w : work) {
      const bool started = w.next_running < w.running.size();
      Sequence* next = started ? w.running[w.next_running]
                       : admitting && w.next_waiting != waiting_.end() ? *w.next_waiting
                                                                       : nullptr;
      if (next == nullptr) continue;
      const int64_t service = w.share->service;
      const bool before = best == nullptr || service < best_service ||
                          (service == best_service &&
                           (started != best_started ? !started : earlier(next, best_next)));
      if (before) {
        best = &w;
        best_next = next;
        best_service = service;
        best_started = started;
      }
    }
    if (best == nullptr) break;
    if (best_started) {
      ++best->next_running;
      schedule_running(*best_next, budget, plan);
      continue;
    }
    const Waiting::iterator tried = best->next_waiting;
    const Waiting::iterator after = advance(*best, tried);
    if (!admit(*best_next, budget, plan)) {  // stays waiting; later arrivals do not overtake it
      admitting = false;
      continue;
    }
    best->next_waiting = after;  // `tried` left waiting_; `after` is still valid
  }
}

// The latest sequence, not yet planned in this step, of the client holding the most blocks in
// `pool` among those (other than `asker`) that would still hold at least as many as `asker`
// holds plus `asker_more` without it; null when no client would. The bound is what keeps the
// preemptions for fairness from going round: the client that yields never ends up smaller than
// the one it yields to, so the two cannot take the cache from each other in turn, and a client's
// only sequence is never preempted for another's smaller one. One pass over the running ones.
Sequence* Scheduler::yielding_sequence(int32_t pool, const FairShares::Client& asker, int64_t asker_more,
                                       const core::StepPlan& plan) const {
  struct Held {
    int64_t blocks = 0;
    Sequence* latest = nullptr;  // its latest sequence not planned yet
  };
  std::unordered_set<int64_t> planned_ids;
  for (const core::ScheduledSequence& e : plan.sequences) planned_ids.insert(e.sequence_id);
  std::unordered_map<FairShares::Client, Held, FairShares::ClientHash> held;
  const WaitingOrder later = waiting_.key_comp();  // a client's lowest-priority, latest sequence yields
  for (Sequence* s : running_) {
    if (pool_of(*s) != pool) continue;
    Held& h = held[FairShares::client_of(*s)];
    h.blocks += static_cast<int64_t>(s->block_table.size());
    if (planned_ids.count(s->id) == 0 && (h.latest == nullptr || later(h.latest, s))) h.latest = s;
  }
  const auto asker_it = held.find(asker);
  const int64_t asker_blocks = (asker_it == held.end() ? 0 : asker_it->second.blocks) + asker_more;
  Sequence* victim = nullptr;
  int64_t victim_held = 0;
  for (const auto& [client, h] : held) {
    if (client == asker || h.latest == nullptr || (victim != nullptr && h.blocks <= victim_held)) continue;
    if (h.blocks - static_cast<int64_t>(h.latest->block_table.size()) >= asker_blocks) {
      victim = h.latest;
      victim_held = h.blocks;
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
