#include "tachyon/engine/scheduler.h"

#include <algorithm>
#include <unordered_map>

#include "tachyon/base/check.h"

namespace tachyon::engine {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kNone: return "";
  }
  return "";
}

bool Scheduler::WaitingOrder::operator()(const Sequence* a, const Sequence* b) const {
  if (by_priority && a->params->priority != b->params->priority) return a->params->priority < b->params->priority;
  if (a->arrival != b->arrival) return a->arrival < b->arrival;
  return a->id < b->id;
}

Scheduler::Scheduler(const core::SchedulerConfig& config, KvCacheManager& kv_cache)
    : config_(config), kv_(kv_cache), waiting_(WaitingOrder{config.policy != core::SchedulingPolicy::kFcfs}) {
  TACHYON_CHECK(config.max_num_batched_tokens > 0 && config.max_num_seqs > 0)
      << "max_num_batched_tokens and max_num_seqs must be positive";
  TACHYON_CHECK(config.enable_chunked_prefill || config.max_num_batched_tokens >= config.max_model_len)
      << "without chunked prefill, max_num_batched_tokens (" << config.max_num_batched_tokens
      << ") must be >= max_model_len (" << config.max_model_len << ") or long prompts could never run";
}

// The KV pool a sequence's blocks are in (pool 0 before it has any).
int32_t Scheduler::pool_of(const Sequence& sequence) const {
  return sequence.block_table.empty() ? 0 : kv_.pool_of(sequence.block_table.front());
}

void Scheduler::add(Sequence* sequence) {
  if (fair()) shares_.join(*sequence);  // once: a preempted sequence has joined already
  sequence->status = SequenceStatus::kWaiting;
  waiting_.insert(sequence);
}

bool Scheduler::add_imported(Sequence* sequence) {
  const int64_t prompt = sequence->num_prompt_tokens;
  TACHYON_CHECK(sequence->num_tokens() == prompt + 1 && sequence->num_computed_tokens == prompt &&
                static_cast<int64_t>(sequence->block_table.size()) * kv_.block_size() >= prompt)
      << "internal: imported sequence " << sequence->id << " has " << sequence->num_tokens() << " tokens, "
      << sequence->num_computed_tokens << " computed, " << sequence->block_table.size() << " blocks for a prompt of "
      << prompt;
  if (fair()) shares_.join(*sequence);
  sequence->status = SequenceStatus::kRunning;
  if (!sequence->first_scheduled) sequence->first_scheduled = std::chrono::steady_clock::now();
  running_.push_back(sequence);
  commit_computed(*sequence, prompt);
  check_stop(*sequence);
  return !sequence->finished();
}

void Scheduler::abort(Sequence* sequence) {
  if (sequence->finished()) return;
  waiting_.erase(sequence);
  running_.erase(std::remove(running_.begin(), running_.end(), sequence), running_.end());
  finish(*sequence, FinishReason::kAbort);
}

// Whether a sequence with a launched, unapplied step that samples it can be planned now (its next
// input is that step's token, a deferred one). Not when that token ends it by length anyway, and
// not when a penalty reads its output history, which lacks the token: those wait for update().
bool Scheduler::can_plan_ahead(const Sequence& sequence) const {
  if (sequence.num_pending_outputs == 0) return true;
  const core::SamplingParams& p = *sequence.params;
  if (sequence.num_output_tokens() + sequence.num_pending_outputs >= p.max_tokens) return false;
  if (sequence.num_planned_tokens() >= config_.max_model_len) return false;
  return !p.penalizes_outputs();
}

// Tokens this sequence would compute now: what it lacks, within the budget. Without chunked
// prefill a prompt runs whole or not at all.
int64_t Scheduler::tokens_to_schedule(const Sequence& sequence, int64_t budget) const {
  const int64_t remaining = sequence.num_planned_tokens() - sequence.num_scheduled_tokens();
  if (remaining <= budget) return remaining;
  return config_.enable_chunked_prefill ? budget : 0;
}

core::StepPlan Scheduler::schedule() {
  core::StepPlan plan;
  plan.block_size = kv_.block_size();
  num_sampled_in_plan_ = 0;
  int64_t budget = config_.max_num_batched_tokens;
  if (fair()) start_fair_step(plan);
  const size_t num_rebalanced = plan.preempted.size();

  // Decodes first, then chunked prefills still under way, both in arrival order (fair: decodes
  // of the clients with the least service first, so that the others are the victims if the
  // cache runs out).
  std::vector<Sequence*> order = running_;
  const auto prefills = std::stable_partition(order.begin(), order.end(),
                                              [](const Sequence* s) { return s->decoding(); });
  if (fair()) {
    std::stable_sort(order.begin(), prefills, [](const Sequence* a, const Sequence* b) {
      return FairShares::service(*a) < FairShares::service(*b);
    });
  }
  for (auto it = order.begin(); it != prefills; ++it) schedule_running(**it, budget, plan);
  if (fair()) {
    schedule_fair_prefills(std::vector<Sequence*>(prefills, order.end()), budget, num_rebalanced, plan);
    return plan;
  }
  for (auto it = prefills; it != order.end(); ++it) schedule_running(**it, budget, plan);

  // Waiting sequences only when nothing had to be preempted: admitting new work while evicting
  // running work would thrash.
  if (plan.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 && num_running() < config_.max_num_seqs) {
      Sequence* next = *waiting_.begin();
      if (!admit(*next, budget, plan)) break;  // FCFS: later arrivals do not overtake
    }
  }
  return plan;
}

// A running sequence's tokens for this step, within the budget, preempting for room if it must.
void Scheduler::schedule_running(Sequence& sequence, int64_t& budget, core::StepPlan& plan) {
  if (sequence.status != SequenceStatus::kRunning) return;  // preempted earlier in this step
  if (!can_plan_ahead(sequence)) return;
  const int64_t num_new = tokens_to_schedule(sequence, budget);
  if (num_new == 0) return;
  int64_t num_drafts = drafts_to_schedule(sequence, budget - num_new);
  // Lookahead slots for the drafts only where they fit as they are: drafts never preempt.
  if (num_drafts > 0 &&
      !kv_.allocate(sequence.block_table, {}, sequence.num_scheduled_tokens() + num_new + num_drafts)) {
    num_drafts = 0;
  }
  if (!allocate_or_preempt(sequence, num_new, plan)) return;
  append_to_plan(sequence, num_new, plan, num_drafts);
  budget -= num_new + num_drafts;
}

// Drafts that can ride along with a decoding sequence's last known token: as many as it has,
// within the budget left, and no more than a full acceptance could use (max_tokens, max_model_len).
int64_t Scheduler::drafts_to_schedule(const Sequence& sequence, int64_t budget) const {
  if (sequence.draft_tokens.empty() || !sequence.decoding()) return 0;
  int64_t k = static_cast<int64_t>(sequence.draft_tokens.size());
  k = std::min(k, budget);
  k = std::min(k, config_.max_model_len - sequence.num_tokens() - 1);
  k = std::min(k, static_cast<int64_t>(sequence.params->max_tokens) - sequence.num_output_tokens() - 1);
  return std::max<int64_t>(k, 0);
}

// The longest cached prefix first: its K/V is there (a prefix hit, an n > 1 sibling, a resumed
// sequence); ties go to the lowest index.
std::vector<int32_t> Scheduler::pool_order(const Sequence& sequence) const {
  const int32_t pools = kv_.num_pools();
  std::vector<int32_t> order(static_cast<size_t>(pools));
  if (pools == 1) return order;
  std::vector<int64_t> hit(static_cast<size_t>(pools)), running(static_cast<size_t>(pools), 0);
  for (int32_t p = 0; p < pools; ++p) {
    order[static_cast<size_t>(p)] = p;
    hit[static_cast<size_t>(p)] = static_cast<int64_t>(kv_.cached_prefix(sequence.block_hashes, sequence.num_tokens(), p).size());
  }
  for (const Sequence* s : running_) ++running[static_cast<size_t>(pool_of(*s))];
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const size_t i = static_cast<size_t>(a), j = static_cast<size_t>(b);
    if (hit[i] != hit[j]) return hit[i] > hit[j];
    if (running[i] != running[j]) return running[i] < running[j];
    return kv_.num_free_blocks(a) > kv_.num_free_blocks(b);
  });
  return order;
}

// Takes the prefix-cache hits, allocates the rest, and moves the sequence to running.
bool Scheduler::admit(Sequence& sequence, int64_t& budget, core::StepPlan& plan) {
  extend_block_hashes(sequence.block_hashes, sequence.tokens, kv_.block_size());
  const std::vector<int32_t> pools = pool_order(sequence);
  std::vector<int32_t> hits;
  int64_t hit_tokens = 0, num_new = 0;
  bool allocated = false;
  for (size_t i = 0; i < pools.size() && !allocated; ++i) {
    // The preferred pool's lookup counts in the prefix-cache stats; a fallback's does not.
    hits = i == 0 ? kv_.find_cached_prefix(sequence.block_hashes, sequence.num_tokens(), pools[i])
                  : kv_.cached_prefix(sequence.block_hashes, sequence.num_tokens(), pools[i]);
    hit_tokens = static_cast<int64_t>(hits.size()) * kv_.block_size();
    const int64_t remaining = sequence.num_tokens() - hit_tokens;
    num_new = remaining <= budget ? remaining : (config_.enable_chunked_prefill ? budget : 0);
    if (num_new == 0) return false;
    allocated = kv_.allocate(sequence.block_table, hits, hit_tokens + num_new, pools[i]);
  }
  if (!allocated) return false;
  waiting_.erase(&sequence);
  sequence.num_computed_tokens = hit_tokens;
  sequence.num_cached_blocks = hits.size();
  sequence.num_prefix_hit_tokens = hit_tokens;
  sequence.status = SequenceStatus::kRunning;
  if (!sequence.first_scheduled) sequence.first_scheduled = std::chrono::steady_clock::now();
  running_.push_back(&sequence);
  append_to_plan(sequence, num_new, plan);
  budget -= num_new;
  return true;
}

// Makes room for num_new more tokens, preempting victims until it fits. False when the
// sequence itself had to be preempted.
bool Scheduler::allocate_or_preempt(Sequence& sequence, int64_t num_new, core::StepPlan& plan) {
  while (!kv_.allocate(sequence.block_table, {}, sequence.num_scheduled_tokens() + num_new)) {
    Sequence* victim = pick_victim(sequence, plan);
    preempt(*victim, plan);
    if (victim == &sequence) return false;
  }
  return true;
}

// The running sequence that matters least (lowest priority, then latest arrival) among those
// not yet planned this step and holding blocks in the asking sequence's KV pool (only those free
// room for it); the asking sequence itself when no other is left. Fair policy: pick_fair_victim.
Sequence* Scheduler::pick_victim(Sequence& asking, const core::StepPlan& plan) const {
  return fair() ? pick_fair_victim(asking, plan) : pick_fcfs_victim(asking, plan);
}

Sequence* Scheduler::pick_fcfs_victim(Sequence& asking, const core::StepPlan& plan) const {
  Sequence* victim = &asking;
  const WaitingOrder later{by_priority()};
  const int32_t pool = pool_of(asking);
  for (Sequence* candidate : running_) {
    if (pool_of(*candidate) == pool && !planned(*candidate, plan) && later(victim, candidate)) victim = candidate;
  }
  return victim;
}

bool Scheduler::planned(const Sequence& sequence, const core::StepPlan& plan) {
  return std::any_of(plan.sequences.begin(), plan.sequences.end(),
                     [&](const core::ScheduledSequence& e) { return e.sequence_id == sequence.id; });
}

// Preemption by recompute: blocks go back (full ones stay in the prefix cache), tokens stay.
void Scheduler::preempt(Sequence& sequence, core::StepPlan& plan) {
  running_.erase(std::remove(running_.begin(), running_.end(), &sequence), running_.end());
  kv_.free(sequence.block_table);
  sequence.num_computed_tokens = 0;
  sequence.num_cached_blocks = 0;
  sequence.num_inflight_tokens = 0;  // its launched steps' outputs are dropped by update()
  sequence.num_pending_outputs = 0;
  sequence.draft_tokens.clear();
  ++sequence.num_preemptions;
  plan.preempted.push_back(sequence.id);
  add(&sequence);
}

void Scheduler::append_to_plan(Sequence& sequence, int64_t num_new, core::StepPlan& plan, int64_t num_drafts) {
  core::ScheduledSequence entry;
  entry.sequence_id = sequence.id;
  entry.first_token = plan.num_tokens();
  entry.num_tokens = num_new + num_drafts;
  entry.num_computed = sequence.num_scheduled_tokens();
  entry.block_table = sequence.block_table;
  entry.sample = entry.num_computed + num_new == sequence.num_planned_tokens();
  if (!entry.sample && entry.num_computed + num_new < sequence.num_tokens()) {
    entry.next_token = sequence.tokens[static_cast<size_t>(entry.num_computed + num_new)];
  }
  entry.draft_tokens.assign(sequence.draft_tokens.begin(), sequence.draft_tokens.begin() + num_drafts);
  sequence.draft_tokens.clear();  // proposals are for one step
  const int32_t block_size = kv_.block_size();
  for (int64_t i = 0; i < entry.num_tokens; ++i) {
    const int64_t position = entry.num_computed + i;
    if (i >= num_new) {
      plan.token_ids.push_back(entry.draft_tokens[static_cast<size_t>(i - num_new)]);
    } else if (position < sequence.num_tokens()) {
      plan.token_ids.push_back(sequence.tokens[static_cast<size_t>(position)]);
    } else {
      // The token the last launched step samples for it: a placeholder the runner fills.
      TACHYON_CHECK(position == sequence.num_tokens() && sequence.num_pending_outputs == 1 &&
                    sequence.last_sampled_row >= 0)
          << "internal: sequence " << sequence.id << " plans position " << position << " with "
          << sequence.num_tokens() << " known tokens and " << sequence.num_pending_outputs << " pending";
      plan.deferred_tokens.push_back({plan.num_tokens(), sequence.last_sampled_row});
      plan.token_ids.push_back(0);
    }
    plan.positions.push_back(position);
    plan.slot_mapping.push_back(static_cast<int64_t>(sequence.block_table[static_cast<size_t>(position / block_size)]) *
                                    block_size +
                                position % block_size);
  }
  if (entry.sample) {
    // The last known token's row, then one per draft.
    for (int64_t i = 0; i <= num_drafts; ++i) plan.logits_rows.push_back(plan.num_tokens() - 1 - num_drafts + i);
    const core::SamplingParams& p = *sequence.params;
    entry.params = sequence.params;
    entry.seed = sequence.seed;
    entry.num_output_tokens = sequence.num_output_tokens() + sequence.num_pending_outputs;
    const auto prompt_end = sequence.tokens.begin() + sequence.num_prompt_tokens;
    if (p.penalizes_prompt()) entry.prompt_tokens.assign(sequence.tokens.begin(), prompt_end);
    if (p.penalizes_outputs()) entry.output_tokens.assign(prompt_end, sequence.tokens.end());
    entry.eos_token_id = config_.eos_token_id;
    sequence.last_sampled_row = num_sampled_in_plan_++;
  }
  if (fair()) shares_.charge(sequence, entry.num_tokens);
  sequence.num_inflight_tokens += entry.num_tokens;
  sequence.num_pending_outputs += entry.sample;
  plan.sequences.push_back(std::move(entry));
}

std::vector<Sequence*> Scheduler::update(const core::StepPlan& plan, std::span<const int32_t> sampled) {
  std::vector<core::SampledToken> tokens(sampled.size());
  for (size_t i = 0; i < sampled.size(); ++i) tokens[i].token = sampled[i];
  core::StepOutput output = core::one_token_each(plan, std::move(tokens));
  return update(plan, output);
}

std::vector<Sequence*> Scheduler::update(const core::StepPlan& plan, core::StepOutput& output) {
  std::vector<Sequence*> touched;
  std::unordered_map<int64_t, Sequence*> by_id;  // one lookup per planned sequence, not a scan
  by_id.reserve(running_.size());
  for (Sequence* s : running_) by_id.emplace(s->id, s);
  size_t next_sample = 0;
  for (const core::ScheduledSequence& entry : plan.sequences) {
    auto it = by_id.find(entry.sequence_id);
    if (it == by_id.end()) {  // aborted or preempted between schedule and update: nothing applies
      if (entry.sample) {
        TACHYON_CHECK(next_sample < output.sequences.size())
            << "runner returned " << output.sequences.size() << " outputs for more sampled sequences";
        output.sequences[next_sample].tokens.clear();
        output.sequences[next_sample].num_draft_tokens = 0;
        ++next_sample;
      }
      continue;
    }
    Sequence& sequence = *it->second;
    sequence.num_inflight_tokens -= entry.num_tokens;
    sequence.num_pending_outputs -= entry.sample;
    if (!entry.sample) {
      commit_computed(sequence, entry.num_computed + entry.num_tokens);
      continue;
    }
    TACHYON_CHECK(next_sample < output.sequences.size())
        << "runner returned " << output.sequences.size() << " outputs for more sampled sequences";
    apply_output(sequence, entry, output.sequences[next_sample++]);
    touched.push_back(&sequence);
  }
  return touched;
}

// The K/V of the first num_computed tokens is in the cache: blocks whose every token is computed
// become reusable by other sequences, and siblings waiting for the prompt may start.
void Scheduler::commit_computed(Sequence& sequence, int64_t num_computed) {
  sequence.num_computed_tokens = num_computed;
  extend_block_hashes(sequence.block_hashes, std::span(sequence.tokens).first(static_cast<size_t>(num_computed)),
                      kv_.block_size());
  const size_t computed_blocks = static_cast<size_t>(num_computed / kv_.block_size());
  kv_.cache_full_blocks(sequence.block_table, std::span(sequence.block_hashes).first(computed_blocks),
                        sequence.num_cached_blocks);
  sequence.num_cached_blocks = std::max(sequence.num_cached_blocks, computed_blocks);
  if (num_computed >= sequence.num_prompt_tokens) release_forks(sequence);
}

// 1 + accepted tokens, applied as that many plain steps: each commits the K/V of the token
// before it, appends it and checks stops; the first that finishes the sequence ends the list.
// The lookahead slots of rejected drafts go back to the KV manager.
void Scheduler::apply_output(Sequence& sequence, const core::ScheduledSequence& entry, core::SequenceOutput& out) {
  const int64_t k = entry.num_draft_tokens();
  const int64_t accepted = out.num_accepted();
  TACHYON_CHECK(out.sequence_id == entry.sequence_id)
      << "runner output for sequence " << out.sequence_id << " where the plan has " << entry.sequence_id;
  TACHYON_CHECK(accepted >= 0 && accepted <= k)
      << "runner returned " << out.tokens.size() << " tokens for sequence " << entry.sequence_id << " with " << k
      << " drafts";
  for (int64_t i = 0; i < accepted; ++i) {
    TACHYON_CHECK(out.tokens[static_cast<size_t>(i)].token == entry.draft_tokens[static_cast<size_t>(i)])
        << "runner accepted token " << out.tokens[static_cast<size_t>(i)].token << " for draft "
        << entry.draft_tokens[static_cast<size_t>(i)] << " of sequence " << entry.sequence_id;
  }
  size_t kept = 0;
  for (int64_t i = 0; i <= accepted; ++i) {
    commit_computed(sequence, i == 0 ? entry.num_computed + entry.num_tokens - k : sequence.num_computed_tokens + 1);
    sequence.tokens.push_back(out.tokens[static_cast<size_t>(i)].token);
    ++kept;
    check_stop(sequence);
    if (sequence.finished()) break;
  }
  out.tokens.resize(kept);
  // Rejected drafts' slots go back; those of a later launched step stay.
  if (!sequence.finished()) kv_.trim(sequence.block_table, sequence.num_scheduled_tokens());
}

void Scheduler::check_stop(Sequence& sequence) {
  const core::SamplingParams& p = *sequence.params;
  const int32_t token = sequence.tokens.back();
  const bool may_stop = sequence.num_output_tokens() >= p.min_tokens;
  if (may_stop && !p.ignore_eos && config_.eos_token_id && token == *config_.eos_token_id) {
    sequence.stop_token = token;
    finish(sequence, FinishReason::kStop);
  } else if (may_stop && std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end()) {
    sequence.stop_token = token;
    finish(sequence, FinishReason::kStop);
  } else if (sequence.num_output_tokens() >= p.max_tokens || sequence.num_tokens() >= config_.max_model_len) {
    finish(sequence, FinishReason::kLength);
  }
}

void Scheduler::finish(Sequence& sequence, FinishReason reason) {
  shares_.leave(sequence);
  running_.erase(std::remove(running_.begin(), running_.end(), &sequence), running_.end());
  kv_.free(sequence.block_table);
  sequence.status = SequenceStatus::kFinished;
  sequence.finish_reason = reason;
  release_forks(sequence);
}

// Siblings of an n > 1 request wait for the first one's prompt so they find it in the prefix
// cache instead of computing it n times.
void Scheduler::release_forks(Sequence& sequence) {
  for (Sequence* fork : sequence.pending_forks) {
    if (!fork->finished()) add(fork);
  }
  sequence.pending_forks.clear();
}

}  // namespace tachyon::engine
