#include "tachyon/engine/engine_core.h"

#include <algorithm>
#include <exception>

#include "tachyon/engine/structured_masks.h"

namespace tachyon::engine {
namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One KV pool of config.num_blocks blocks per replica with its own cache (data-parallel
// attention): the scheduler plans each replica's blocks from its pool.
int32_t kv_pools(const runner::ModelRunner* runner) { return runner != nullptr ? runner->kv_cache_replicas() : 1; }

}  // namespace

EngineCore::EngineCore(const core::EngineConfig& config, std::unique_ptr<runner::ModelRunner> runner,
                       std::unique_ptr<Drafter> drafter)
    : config_(config),
      runner_(std::move(runner)),
      kv_(config.num_blocks * kv_pools(runner_.get()), config.block_size, config.enable_prefix_caching,
          kv_pools(runner_.get())),
      scheduler_(config.scheduler, kv_) {
  TACHYON_CHECK(runner_ != nullptr) << "EngineCore needs a runner";
  overlap_ = config.device.async_scheduling == core::AsyncScheduling::kOn ||
             (config.device.async_scheduling == core::AsyncScheduling::kAuto && runner_->overlaps_steps());
  // A sequence of max_model_len tokens must fit one pool on its own, or it could wait forever.
  TACHYON_CHECK(static_cast<int64_t>(config.num_blocks) * config.block_size >= config.scheduler.max_model_len)
      << "the KV cache holds " << static_cast<int64_t>(config.num_blocks) * config.block_size
      << " tokens, less than max_model_len " << config.scheduler.max_model_len
      << ": give it more blocks or lower max_model_len";
  if (drafter != nullptr || config.speculative.enabled()) {
    TACHYON_CHECK(config.speculative.enabled()) << "internal: a drafter without config.speculative";
    set_drafter(drafter != nullptr ? std::move(drafter) : make_drafter(config.speculative));
    stats_.num_speculative_tokens = config.speculative.num_speculative_tokens;
  }
  publish_stats();
}

EngineCore::~EngineCore() {
  stop();
  // A step still in flight finishes before the runner (and the memory it writes) goes away. Its
  // output is dropped, and so is an error it reports: a destructor must not throw.
  if (in_flight_) {
    try {
      runner_->wait();
    } catch (const std::exception&) {
    }
  }
}

int64_t EngineCore::submit(std::vector<int32_t> prompt, const core::SamplingParams& params,
                           const std::shared_ptr<OutputChannel>& channel) {
  return submit(std::move(prompt), params, channel, false, nullptr);
}

int64_t EngineCore::submit(std::vector<int32_t> prompt, const core::SamplingParams& params,
                           const std::shared_ptr<OutputChannel>& channel, bool export_kv,
                           std::shared_ptr<const KvPayload> imported) {
  TACHYON_CHECK(channel != nullptr) << "submit needs an output channel";
  TACHYON_CHECK(!prompt.empty()) << "the prompt is empty";
  const int64_t vocab = runner_->vocab_size();
  params.validate(vocab);
  TACHYON_CHECK(params.structured == nullptr || config_.scheduler.eos_token_id || !params.stop_token_ids.empty())
      << "structured outputs need an end-of-sequence token to finish a complete output; this model has none "
         "configured: give stop_token_ids";
  for (int32_t id : prompt) {
    TACHYON_CHECK(id >= 0 && id < vocab) << "prompt token id " << id << " is outside the vocabulary [0, " << vocab << ")";
  }
  const int64_t max_len = config_.scheduler.max_model_len;
  TACHYON_CHECK(static_cast<int64_t>(prompt.size()) < max_len)
      << "the prompt has " << prompt.size() << " tokens; this model's context is " << max_len << " tokens";
  const int64_t id = next_request_id_.fetch_add(1);
  {
    std::lock_guard lock(inbox_mutex_);
    // Under the inbox's lock: fail() takes the inbox under it, so no submission slips in after.
    if (failure_) throw EngineFailedError(*failure_ + "; it takes no more requests");
    if (static_cast<int64_t>(inbox_.size()) + waiting_snapshot_.load() >= config_.max_queued_requests) {
      throw QueueFullError("the engine's waiting queue is full (" + std::to_string(config_.max_queued_requests) +
                           " requests); retry later");
    }
    // A prefill's lease is expected before the engine can run it, so that a release may cancel it.
    if (export_kv) leases_.expect(id, lease_blocks(static_cast<int64_t>(prompt.size())));
    inbox_.push_back({id, std::move(prompt), std::make_shared<const core::SamplingParams>(params), channel, export_kv,
                      std::move(imported)});
  }
  inbox_ready_.notify_one();
  return id;
}

void EngineCore::abort(int64_t request_id, std::optional<int32_t> index) {
  {
    std::lock_guard lock(inbox_mutex_);
    abort_inbox_.emplace_back(request_id, index);
  }
  inbox_ready_.notify_one();
}

void EngineCore::abort_all() {
  abort_all_ = true;
  inbox_ready_.notify_one();
}

void EngineCore::drain_inbox() {
  std::vector<Submission> submissions;
  std::vector<std::pair<int64_t, std::optional<int32_t>>> aborts;
  {
    std::lock_guard lock(inbox_mutex_);
    submissions.swap(inbox_);
    aborts.swap(abort_inbox_);
  }
  for (Submission& s : submissions) admit(std::move(s));
  for (const auto& [id, index] : aborts) abort_request(id, index);
  if (abort_all_.exchange(false)) {
    std::vector<int64_t> all;
    for (const auto& [id, request] : active_) all.push_back(id);
    for (int64_t id : all) abort_request(id);
  }
}

// A request becomes n sequences; the first runs its prompt, the others wait for it so that
// they start from its cached blocks.
void EngineCore::admit(Submission&& submission) {
  if (submission.imported != nullptr) return admit_imported(std::move(submission));
  ActiveRequest request;
  request.channel = std::move(submission.channel);
  request.logprobs = submission.params->logprobs >= 0;
  const uint64_t base_seed = submission.params->seed ? *submission.params->seed : splitmix64(seed_state_);
  const int64_t arrival = next_arrival_++;
  for (int32_t index = 0; index < submission.params->n; ++index) {
    auto sequence = std::make_unique<Sequence>();
    sequence->id = next_sequence_id_++;
    sequence->request_id = submission.request_id;
    sequence->index = index;
    sequence->arrival = arrival;
    sequence->params = submission.params;
    sequence->seed = base_seed + static_cast<uint64_t>(index);
    sequence->tokens = submission.prompt;
    sequence->num_prompt_tokens = static_cast<int64_t>(submission.prompt.size());
    sequence->matcher = make_matcher(*submission.params);
    if (sequence->matcher != nullptr) ++num_constrained_;
    sequences_[sequence->id] = sequence.get();
    request.sequences.push_back(std::move(sequence));
  }
  request.num_unfinished = submission.params->n;
  Sequence* first = request.sequences.front().get();
  for (size_t i = 1; i < request.sequences.size(); ++i) first->pending_forks.push_back(request.sequences[i].get());
  scheduler_.add(first);
  active_.emplace(submission.request_id, std::move(request));
}

void EngineCore::abort_request(int64_t request_id, std::optional<int32_t> index, const std::string& reason) {
  auto it = active_.find(request_id);
  if (it == active_.end()) return;
  ActiveRequest& request = it->second;
  RequestOutput out;
  out.request_id = request_id;
  for (auto& sequence : request.sequences) {
    if (sequence->finished() || (index && sequence->index != *index)) continue;
    scheduler_.abort(sequence.get());
    --request.num_unfinished;
    CompletionDelta delta;
    delta.index = sequence->index;
    delta.finish_reason = FinishReason::kAbort;
    delta.abort_reason = reason;
    out.completions.push_back(std::move(delta));
  }
  out.finished = request.num_unfinished == 0;
  if (auto channel = request.channel.lock()) channel->push(std::move(out));
  if (request.num_unfinished > 0) return;
  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.requests_aborted;
  }
  finish_request(request_id);
}

// DESIGN rule 1: a consumer that went away takes its request with it.
void EngineCore::reap_abandoned() {
  std::vector<int64_t> abandoned;
  for (const auto& [id, request] : active_) {
    if (request.channel.expired()) abandoned.push_back(id);
  }
  for (int64_t id : abandoned) abort_request(id);
}

void EngineCore::finish_request(int64_t request_id) {
  auto it = active_.find(request_id);
  if (it == active_.end()) return;
  for (auto& sequence : it->second.sequences) {
    if (sequence->matcher != nullptr) --num_constrained_;
    sequences_.erase(sequence->id);
    if (drafter_ != nullptr) drafter_->release(sequence->id);
  }
  leases_.forget(request_id);
  active_.erase(it);
}

void EngineCore::set_drafter(std::unique_ptr<Drafter> drafter) {
  TACHYON_CHECK(!thread_.joinable()) << "set_drafter() after start()";
  TACHYON_CHECK(drafter == nullptr || runner_->verifies_drafts()) << kDraftsNeedVerifyingRunner;
  TACHYON_CHECK(drafter == nullptr || config_.device.async_scheduling != core::AsyncScheduling::kOn)
      << "draft tokens need synchronous scheduling (drafts are proposed from known tokens): use "
         "--async-scheduling auto or off with speculative decoding";
  if (drafter != nullptr) overlap_ = false;
  drafter_ = std::move(drafter);
}

// Drafts for every running sequence whose next step is a decode, in one batch.
void EngineCore::propose_drafts() {
  if (drafter_ == nullptr) return;
  std::vector<Sequence*> decoding;
  std::vector<DraftRequest> requests;
  for (Sequence* sequence : scheduler_.running()) {
    // A constrained sequence's drafts would need a mask per draft position: it decodes plainly.
    if (!sequence->decoding() || sequence->matcher != nullptr) continue;
    decoding.push_back(sequence);
    requests.push_back({sequence->id, sequence->tokens, {}});
  }
  if (requests.empty()) return;
  drafter_->propose_batch(requests);
  for (size_t i = 0; i < decoding.size(); ++i) decoding[i]->draft_tokens = std::move(requests[i].drafts);
}

bool EngineCore::step() {
  if (failed_) return false;
  try {
    return run_step();
  } catch (const std::exception& e) {
    fail(e.what());
    throw;
  } catch (...) {
    fail("a step threw an exception that is not a std::exception");
    throw;
  }
}

// Synchronous: plan, launch, wait, apply. Overlapped (asynchronous scheduling): plan step n+1
// while step n runs, launch it behind step n, then wait for step n and apply it; the device
// never waits for the host between the two. Sequences that step n finishes may have been
// planned into step n+1: update() drops that step's output for them, and the slots it writes
// are freed blocks that later steps overwrite after it, in launch order.
bool EngineCore::run_step() {
  drain_inbox();
  release_leases();
  reap_abandoned();
  finish_copies();          // engine_core_kv.cpp: imports whose copy by reference came back
  start_pending_imports();  // engine_core_kv.cpp: imported prompts wait for a slot like any other
  publish_prefix_hashes();  // engine_core_kv.cpp: when a router asked
  propose_drafts();
  // A constrained sequence's next mask needs the token the step in flight samples. A runner that
  // takes late masks gets them once that step is applied (below); for the others, apply it first.
  const bool late_masks = overlap_ && runner_->takes_late_token_masks();
  const bool applied_early = overlap_ && !late_masks && in_flight_ && num_constrained_ > 0;
  if (applied_early) {
    apply_step(*in_flight_);
    in_flight_.reset();
  }
  core::StepPlan plan = scheduler_.schedule();
  std::vector<ConstraintFailure> unmasked;
  bool masks_follow = false;  // the plan's masks are supplied after its launch (late masks)
  if (num_constrained_ > 0 && late_masks) {
    masks_follow = mark_masks_follow(plan, sequences_);
  } else if (num_constrained_ > 0) {
    unmasked = attach_token_masks(plan, sequences_, config_.scheduler.eos_token_id);
  }
  plan.forced_acceptance = config_.speculative.forced_acceptance;
  plan.return_hidden_states = drafter_ != nullptr && drafter_->needs_hidden_states();
  waiting_snapshot_ = num_waiting();
  if (plan.empty() && !in_flight_) {
    publish_stats();
    wait_for_copies(std::chrono::milliseconds(10));  // idle but for copies: take one as it lands
    return applied_early;
  }
  if (!plan.empty()) runner_->launch(plan);
  if (overlap_) {
    if (in_flight_) apply_step(*in_flight_);
    in_flight_.reset();
    if (!plan.empty()) in_flight_ = std::move(plan);
    // The launched step's masks, from matchers that now hold the applied step's tokens; the
    // device runs the step's forward meanwhile. Before the next launch: its deferred tokens are
    // this step's samples.
    if (masks_follow) {  // the plan had sequences, so it is the step in flight now
      std::vector<core::AllowedTokens> masks;
      unmasked = late_token_masks(*in_flight_, sequences_, config_.scheduler.eos_token_id, masks);
      runner_->supply_token_masks(masks);
    }
  }
  // Sampled without a mask: aborted before their step is applied (the plan in flight, or the one
  // applied just below), so those tokens are dropped, never delivered. Each completion alone,
  // with its reason for the client.
  for (const ConstraintFailure& f : unmasked) abort_request(f.request_id, f.index, f.reason);
  if (!overlap_) apply_step(plan);
  waiting_snapshot_ = num_waiting();
  publish_stats();
  return true;
}

// Waits for the oldest launched step (`plan`) and applies it: tokens, stats, delivery. The
// drafter sees what was applied before delivery releases the sequences that finished.
void EngineCore::apply_step(const core::StepPlan& plan) {
  core::StepOutput output = runner_->wait();
  std::vector<PrefilledLease> leases = lease_prefilled(plan, output);  // before update() frees their blocks
  scheduler_.update(plan, output);
  const std::vector<ConstraintFailure> refused =
      num_constrained_ > 0 ? advance_matchers(output, sequences_) : std::vector<ConstraintFailure>{};
  if (drafter_ != nullptr) drafter_->observe(plan, output);
  if (!leases.empty()) grant_prefilled(std::move(leases));  // with the drafter's state of each prompt
  count_step(plan, output);
  if (step_observer_) step_observer_(plan.num_tokens());
  deliver(plan, output);
  for (const ConstraintFailure& f : refused) abort_request(f.request_id, f.index, f.reason);
}

// Counts the step's work before deliver() forgets finished requests.
void EngineCore::count_step(const core::StepPlan& plan, const core::StepOutput& output) {
  std::lock_guard lock(stats_mutex_);
  ++stats_.steps;
  stats_.preemptions += static_cast<int64_t>(plan.preempted.size());
  for (const core::SequenceOutput& s : output.sequences) {
    stats_.generated_tokens += static_cast<int64_t>(s.tokens.size());
    if (s.tokens.empty() || s.num_draft_tokens == 0) continue;  // nothing applied, or no drafts
    stats_.draft_tokens += s.num_draft_tokens;
    stats_.draft_tokens_accepted += s.num_accepted();
    ++stats_.num_drafts;
    const int64_t positions = std::min<int64_t>(s.num_accepted(), core::kMaxSpeculativeTokens);
    for (int64_t i = 0; i < positions; ++i) ++stats_.draft_tokens_accepted_per_position[static_cast<size_t>(i)];
  }
  for (const core::ScheduledSequence& s : plan.sequences) {
    auto it = sequences_.find(s.sequence_id);
    if (it == sequences_.end()) continue;
    // Tokens before the prompt's end are prompt work (prefix hits never reach the plan).
    const int64_t prompt_end = it->second->num_prompt_tokens;
    stats_.prompt_tokens_computed += std::max<int64_t>(0, std::min(prompt_end, s.num_computed + s.num_tokens) - s.num_computed);
  }
}

// Copies the engine-thread gauges into the snapshot that stats() hands to other threads.
void EngineCore::publish_stats() {
  std::lock_guard lock(stats_mutex_);
  stats_.num_running = scheduler_.num_running();
  stats_.num_waiting = num_waiting();
  stats_.num_active_requests = static_cast<int64_t>(active_.size());
  stats_.num_live_sequences = static_cast<int64_t>(sequences_.size());
  stats_.kv_blocks_free = kv_.num_free_blocks();
  stats_.kv_blocks_total = kv_.num_blocks();
  stats_.kv = kv_.stats();
}

// One delta per request that changed this step, merged over its sequences.
void EngineCore::deliver(const core::StepPlan& plan, const core::StepOutput& output) {
  std::unordered_map<int64_t, RequestOutput> outputs;
  std::vector<int64_t> order;  // requests in plan order, so delivery is deterministic
  size_t next = 0;
  for (const core::ScheduledSequence& entry : plan.sequences) {
    if (!entry.sample) continue;
    const core::SequenceOutput& tokens = output.sequences[next++];
    if (tokens.tokens.empty()) continue;  // update() applied nothing: aborted or preempted meanwhile
    auto it = sequences_.find(entry.sequence_id);
    if (it == sequences_.end()) continue;
    Sequence& sequence = *it->second;
    auto request_it = active_.find(sequence.request_id);
    if (request_it == active_.end()) continue;
    auto [out_it, inserted] = outputs.try_emplace(sequence.request_id);
    RequestOutput& out = out_it->second;
    if (inserted) {
      order.push_back(sequence.request_id);
      out.request_id = sequence.request_id;
      out.num_prompt_tokens = sequence.num_prompt_tokens;
      out.num_prefix_hit_tokens = sequence.num_prefix_hit_tokens;
      out.first_scheduled = sequence.first_scheduled;
    }
    CompletionDelta delta;
    delta.index = sequence.index;
    for (const core::SampledToken& token : tokens.tokens) {
      delta.token_ids.push_back(token.token);
      if (request_it->second.logprobs) delta.logprobs.push_back(token);
    }
    if (sequence.finished()) {
      delta.finish_reason = sequence.finish_reason;
      delta.stop_token = sequence.stop_token;
      --request_it->second.num_unfinished;
    }
    out.completions.push_back(std::move(delta));
  }
  for (int64_t request_id : order) {
    ActiveRequest& request = active_.at(request_id);
    RequestOutput& out = outputs.at(request_id);
    out.finished = request.num_unfinished == 0;
    if (auto channel = request.channel.lock()) channel->push(std::move(out));
    if (request.num_unfinished == 0) {
      {
        std::lock_guard lock(stats_mutex_);
        ++stats_.requests_finished;
      }
      finish_request(request_id);
    }
  }
}

bool EngineCore::has_work() {
  if (failed_) return false;
  {
    std::lock_guard lock(inbox_mutex_);
    if (!inbox_.empty() || !abort_inbox_.empty()) return true;
  }
  return in_flight_.has_value() || scheduler_.has_work() || !pending_imports_.empty() || copies_in_flight_ > 0;
}

void EngineCore::loop() {
  while (!stopping_) {
    try {
      const bool worked = step();
      if (loop_observer_) loop_observer_(worked);
      if (worked) continue;
    } catch (...) {
      return;  // step() failed the engine: every request has its error, and it never steps again
    }
    std::unique_lock lock(inbox_mutex_);
    inbox_ready_.wait_for(lock, std::chrono::milliseconds(50),
                          [&] {
                            return stopping_ || abort_all_ || !inbox_.empty() || !abort_inbox_.empty() ||
                                   !copies_done_.empty();
                          });
  }
}

void EngineCore::start() {
  TACHYON_CHECK(!thread_.joinable()) << "engine already started";
  stopping_ = false;
  thread_ = std::thread([this] { loop(); });
}

void EngineCore::stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  inbox_ready_.notify_all();
  thread_.join();
}

EngineStats EngineCore::stats() {
  std::lock_guard lock(stats_mutex_);
  return stats_;
}

}  // namespace tachyon::engine
