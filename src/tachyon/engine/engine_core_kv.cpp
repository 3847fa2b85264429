// EngineCore's part in prefill/decode disaggregation (engine/kv_transfer.h): prefill-only
// submissions whose prompt KV is leased when their first token is sampled, exports of leased
// rows, and admission of a request with imported rows. Kept apart from engine_core.cpp so that
// the step loop stays on one screen; engine_core.cpp calls in at three places (admit, step,
// apply_step). Test: tests/unit/test_kv_transfer.cpp.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "tachyon/engine/engine_core.h"
#include "tachyon/runner/model_runner.h"

namespace tachyon::engine {
namespace {

// What disaggregation has not been verified with, as one message for the caller.
void check_transferable(const core::SamplingParams& params) {
  TACHYON_CHECK(params.n == 1) << "prefill/decode disaggregation runs n = 1 only (got n = " << params.n << ")";
  TACHYON_CHECK(params.structured == nullptr) << "prefill/decode disaggregation does not carry structured outputs";
  TACHYON_CHECK(params.logprobs < 0) << "prefill/decode disaggregation does not carry logprobs";
}

}  // namespace

int64_t EngineCore::submit_prefill(std::vector<int32_t> prompt, const core::SamplingParams& params,
                                   const std::shared_ptr<OutputChannel>& channel) {
  TACHYON_CHECK(runner_->kv_rows() != nullptr)
      << "this runner cannot export its KV cache (a prefill role needs the CPU runner, or the CUDA runner with a bf16 "
         "cache, no MTP and one GPU)";
  TACHYON_CHECK(drafter_ == nullptr || drafter_->moves_state_with_kv())
      << "a prefill role drafts nothing: it runs without speculative decoding, or with MTP modules whose rows of "
         "the prompt move with its KV";
  check_transferable(params);
  // One token, sampled exactly as the full request would sample its first one (min_tokens masks
  // the end-of-sequence token for it alike).
  core::SamplingParams first = params;
  first.max_tokens = 1;
  first.min_tokens = std::min(first.min_tokens, 1);
  const int64_t blocks = lease_blocks(static_cast<int64_t>(prompt.size()));
  leases_.reserve(blocks);  // throws KvLeasesFullError at the cap
  try {
    return submit(std::move(prompt), first, channel, /*export_kv=*/true, nullptr);
  } catch (...) {
    leases_.unreserve(blocks);
    throw;
  }
}

int64_t EngineCore::lease_blocks(int64_t num_prompt_tokens) const {
  return (num_prompt_tokens + kv_.block_size() - 1) / kv_.block_size();
}

KvPayload EngineCore::export_kv(KvLeaseKey key) {
  runner::KvRowAccess* rows = runner_->kv_rows();
  if (rows == nullptr) throw KvTransferError("this runner cannot export its KV cache");
  KvPayload payload = leases_.export_rows(key, *rows);
  inbox_ready_.notify_one();  // the engine thread frees the lease's blocks
  return payload;
}

void EngineCore::release_kv(KvLeaseKey key) {
  leases_.release(key);
  inbox_ready_.notify_one();
}

int64_t EngineCore::submit_imported(KvPayload payload, const core::SamplingParams& params,
                                    const std::shared_ptr<OutputChannel>& channel) {
  TACHYON_CHECK(channel != nullptr) << "submit needs an output channel";
  check_transferable(params);
  runner::KvRowAccess* rows = runner_->kv_rows();
  if (rows == nullptr) throw KvTransferError("this runner cannot import KV rows");
  if (payload.by_reference()) {
    if (rows->reference_fingerprint().empty() || payload.values_per_token != rows->values_per_token() ||
        !payload.confirm) {
      throw KvTransferError("this cache cannot copy KV rows by reference (or they have " +
                            std::to_string(payload.values_per_token) + " values per token, this cache " +
                            std::to_string(rows->values_per_token()) + ")");
    }
  } else if (payload.rows.empty() && !payload.chunks.empty()) {
    join_kv_chunks(payload, rows->plane_widths());
  }
  const bool rows_fit = payload.values_per_token == rows->values_per_token() &&
                       payload.rows.size() == payload.prompt.size() * static_cast<size_t>(payload.values_per_token);
  if (!payload.by_reference() && !rows_fit) {
    throw KvTransferError("the KV rows do not fit this cache: " + std::to_string(payload.values_per_token) +
                          " values per token (this cache holds " + std::to_string(rows->values_per_token()) +
                          "), " + std::to_string(payload.rows.size()) + " values for " +
                          std::to_string(payload.prompt.size()) + " tokens; are both servers serving the same model?");
  }
  const int64_t vocab = runner_->vocab_size();
  if (payload.first_token < 0 || payload.first_token >= vocab) {
    throw KvTransferError("the imported first token " + std::to_string(payload.first_token) + " is outside the vocabulary");
  }
  // submit() validates the prompt and params and queues the payload with them.
  std::vector<int32_t> prompt = payload.prompt;
  auto shared = std::make_shared<const KvPayload>(std::move(payload));
  return submit(std::move(prompt), params, channel, /*export_kv=*/false, std::move(shared));
}

// Engine thread. Stages the rows of a prefill-only sequence's prompt that this step made final
// (engine/kv_transfer.h): every block the step completed, and once it samples the first token the
// prompt's last rows; then its prompt's blocks get the lease's reference before update()
// finishes the sequence and drops its own, and grant_prefilled() grants the lease. The engine
// thread is the only writer of the cache, so no step races these copies.
std::vector<EngineCore::PrefilledLease> EngineCore::lease_prefilled(const core::StepPlan& plan,
                                                                    const core::StepOutput& output) {
  std::vector<PrefilledLease> leases;
  size_t next = 0;
  for (const core::ScheduledSequence& entry : plan.sequences) {
    const core::SequenceOutput* out = entry.sample ? &output.sequences[next++] : nullptr;
    auto it = sequences_.find(entry.sequence_id);
    if (it == sequences_.end() || !leases_.expected(it->second->request_id)) continue;
    Sequence& sequence = *it->second;
    const bool sampled = out != nullptr && !out->tokens.empty();
    stage_prompt_rows(sequence, entry.num_computed + entry.num_tokens, /*whole=*/sampled);
    if (!sampled) continue;
    const int32_t block_size = kv_.block_size();
    std::vector<int32_t> blocks(sequence.block_table.begin(),
                                sequence.block_table.begin() + (sequence.num_prompt_tokens + block_size - 1) / block_size);
    kv_.retain(blocks);
    std::vector<int32_t> prompt(sequence.tokens.begin(), sequence.tokens.begin() + sequence.num_prompt_tokens);
    leases.push_back({sequence.request_id, sequence.id, std::move(blocks), std::move(prompt), out->tokens.front().token,
                      sequence.seed, sequence.num_prefix_hit_tokens});
  }
  return leases;
}

// Engine thread, after the drafter observed the step that sampled the leases' first tokens.
void EngineCore::grant_prefilled(std::vector<PrefilledLease> leases) {
  for (PrefilledLease& lease : leases) {
    std::string draft_state = drafter_ != nullptr ? drafter_->export_state(lease.sequence_id) : std::string();
    leases_.grant(lease.request_id, std::move(lease.blocks), std::move(lease.prompt), lease.first_token, lease.seed,
                  lease.cached_tokens, std::move(draft_state));
  }
}

// Stages the prompt rows [staged, end) into the lease's stream, where `end` is the last full
// block within `computed` tokens, or the whole prompt once it has run: the blocks that hold them,
// pinned with a reference of the stream's own, not a copy (engine/kv_transfer.h says why). Chunks
// start on a block boundary, so the block table's tail from there addresses them.
void EngineCore::stage_prompt_rows(const Sequence& sequence, int64_t computed, bool whole) {
  const int64_t block_size = kv_.block_size();
  const int64_t begin = leases_.staged_tokens(sequence.request_id);
  const int64_t end = whole ? sequence.num_prompt_tokens
                            : std::min(computed, sequence.num_prompt_tokens) / block_size * block_size;
  if (end <= begin) return;
  const auto first_block = sequence.block_table.begin() + begin / block_size;
  std::vector<int32_t> blocks(first_block, sequence.block_table.begin() + (end + block_size - 1) / block_size);
  kv_.retain(blocks);
  leases_.stage(sequence.request_id, begin, end - begin, std::move(blocks));
}

KvStreamRead EngineCore::read_kv_stream(KvLeaseKey key, size_t from, bool claim, bool by_reference) {
  runner::KvRowAccess* rows = runner_->kv_rows();
  if (rows == nullptr) throw KvTransferError("this runner cannot export its KV cache");
  KvStreamRead read = leases_.read_stream(key, from, claim, *rows, by_reference);
  if (read.commit) inbox_ready_.notify_one();  // the engine thread frees the lease's blocks
  return read;
}

bool EngineCore::release_kv_hold(KvLeaseKey key, bool copied) {
  const bool held = leases_.release_hold(key, copied);
  inbox_ready_.notify_one();  // the engine thread frees the held blocks
  return held;
}

std::string EngineCore::kv_reference_fingerprint() {
  runner::KvRowAccess* rows = runner_->kv_rows();
  return rows != nullptr ? rows->reference_fingerprint() : "";
}

std::string EngineCore::kv_reference_descriptor() {
  runner::KvRowAccess* rows = runner_->kv_rows();
  return rows != nullptr ? rows->reference_descriptor() : "";
}

std::vector<BlockHash> EngineCore::published_prefix_hashes() {
  prefix_hashes_wanted_ = true;
  std::lock_guard lock(prefix_hashes_mutex_);
  return prefix_hashes_;
}

void EngineCore::publish_prefix_hashes() {
  if (!prefix_hashes_wanted_.exchange(false)) return;
  std::vector<BlockHash> hashes = kv_.cached_hashes();
  std::lock_guard lock(prefix_hashes_mutex_);
  prefix_hashes_ = std::move(hashes);
}

void EngineCore::release_leases() {
  for (std::vector<int32_t>& blocks : leases_.take_released(std::chrono::steady_clock::now())) kv_.free(blocks);
}

// Engine thread. The imported request is one sequence that starts running at its first token.
// It waits, as a computed prompt does, for a running slot (max_num_seqs) and for free blocks to
// hold its prompt; then start_imported() writes its rows. Waiting imports go before the
// scheduler's waiting queue (their first token is already sampled) in arrival order.
void EngineCore::admit_imported(Submission&& submission) {
  const KvPayload& payload = *submission.imported;
  auto owned = std::make_unique<Sequence>();
  Sequence* sequence = owned.get();
  sequence->id = next_sequence_id_++;
  sequence->request_id = submission.request_id;
  sequence->arrival = next_arrival_++;
  sequence->params = submission.params;
  sequence->seed = payload.seed;
  sequence->tokens = submission.prompt;
  sequence->num_prompt_tokens = static_cast<int64_t>(submission.prompt.size());
  sequences_[sequence->id] = sequence;
  ActiveRequest request;
  request.channel = std::move(submission.channel);
  request.num_unfinished = 1;
  request.sequences.push_back(std::move(owned));
  active_.emplace(submission.request_id, std::move(request));
  pending_imports_.push_back({sequence->id, std::move(submission.imported)});
}

// Engine thread, before each schedule(): starts the waiting imports that fit now.
void EngineCore::start_pending_imports() {
  while (!pending_imports_.empty()) {
    const PendingImport& next = pending_imports_.front();
    auto it = sequences_.find(next.sequence_id);
    if (it == sequences_.end() || it->second->finished()) {  // aborted while it waited
      pending_imports_.pop_front();
      continue;
    }
    Sequence& sequence = *it->second;
    // An import whose copy runs holds its slot as a running sequence does.
    if (scheduler_.num_running() + copies_in_flight_ >= config_.scheduler.max_num_seqs) return;
    // Into the pool a fresh sequence would start in (with data-parallel replicas: the least
    // busy one with room), so imported prompts spread over the replicas.
    bool allocated = false;
    for (int32_t pool : scheduler_.pool_order(sequence)) {
      if ((allocated = kv_.allocate(sequence.block_table, {}, sequence.num_prompt_tokens, pool))) break;
    }
    if (!allocated) return;
    const std::shared_ptr<const KvPayload> payload = next.payload;
    pending_imports_.pop_front();
    start_imported(sequence, payload);
  }
}

// Rows are written into the sequence's freshly allocated blocks here, and its first token
// delivered (the scheduler decodes on from it). By reference, the copier copies them (with the
// blocks: an abort meanwhile frees nothing it writes), and finish_copies() goes on from there.
void EngineCore::start_imported(Sequence& sequence, const std::shared_ptr<const KvPayload>& payload) {
  if (payload->by_reference()) {
    if (copier_ == nullptr) {
      copier_ = std::make_unique<KvCopier>(*runner_->kv_rows(), [this](KvCopier::Done done) {
        {
          std::lock_guard lock(inbox_mutex_);
          copies_done_.push_back(std::move(done));
        }
        inbox_ready_.notify_one();
      });
    }
    ++copies_in_flight_;
    copier_->submit({sequence.id, payload, std::move(sequence.block_table), sequence.num_prompt_tokens});
    sequence.block_table.clear();
    return;
  }
  runner_->kv_rows()->scatter(sequence.block_table, sequence.num_prompt_tokens, payload->rows);
  deliver_imported(sequence, *payload);
}

// Engine thread, each step: the copies that came back. A confirmed copy's sequence starts; an
// unconfirmed one's blocks are freed and its prompt computed here, from the same seed (its rows
// may be another prompt's); an aborted one's blocks are freed.
void EngineCore::finish_copies() {
  std::vector<KvCopier::Done> done;
  {
    std::lock_guard lock(inbox_mutex_);
    done.swap(copies_done_);
  }
  for (KvCopier::Done& copy : done) {
    --copies_in_flight_;
    {
      std::lock_guard lock(stats_mutex_);
      if (copy.confirmed) {
        ++stats_.kv_reference_imports;
        stats_.kv_reference_bytes += copy.bytes;
        stats_.kv_reference_copy_seconds += copy.seconds;
      } else {
        ++stats_.kv_reference_unconfirmed;
      }
    }
    auto it = sequences_.find(copy.sequence_id);
    if (it == sequences_.end() || it->second->finished()) {  // aborted while it copied
      kv_.free(copy.blocks);
      continue;
    }
    Sequence& sequence = *it->second;
    sequence.block_table = std::move(copy.blocks);
    if (!copy.confirmed) {
      kv_.free(sequence.block_table);
      scheduler_.add(&sequence);
      continue;
    }
    deliver_imported(sequence, *copy.payload);
  }
}

// Engine thread, when it has nothing else to do: waits (at most `at_most`) for a copy to come back.
void EngineCore::wait_for_copies(std::chrono::milliseconds at_most) {
  if (copies_in_flight_ == 0) return;
  std::unique_lock lock(inbox_mutex_);
  inbox_ready_.wait_for(lock, at_most, [&] {
    return stopping_ || abort_all_ || !copies_done_.empty() || !inbox_.empty() || !abort_inbox_.empty();
  });
}

void EngineCore::deliver_imported(Sequence& sequence, const KvPayload& payload) {
  sequence.tokens.push_back(payload.first_token);
  if (drafter_ != nullptr && !payload.draft_state.empty()) {  // the prefill server's drafter ran over the prompt
    const bool taken = drafter_->import_state(sequence.id, sequence.tokens, payload.draft_state);
    std::lock_guard lock(stats_mutex_);
    ++(taken ? stats_.draft_states_imported : stats_.draft_states_refused);
  }
  sequence.num_computed_tokens = sequence.num_prompt_tokens;
  // The prompt ran on the prefill server: the tokens its prefix cache served are the client's cached ones.
  sequence.num_prefix_hit_tokens = std::clamp<int64_t>(payload.cached_tokens, 0, sequence.num_prompt_tokens);
  scheduler_.add_imported(&sequence);
  ActiveRequest& active = active_.at(sequence.request_id);

  RequestOutput out;
  out.request_id = sequence.request_id;
  out.num_prompt_tokens = sequence.num_prompt_tokens;
  out.num_prefix_hit_tokens = sequence.num_prefix_hit_tokens;
  out.first_scheduled = sequence.first_scheduled;
  CompletionDelta delta;
  delta.token_ids.push_back(payload.first_token);
  if (sequence.finished()) {
    delta.finish_reason = sequence.finish_reason;
    delta.stop_token = sequence.stop_token;
    active.num_unfinished = 0;
  }
  out.completions.push_back(std::move(delta));
  const bool finished = active.num_unfinished == 0;
  out.finished = finished;
  if (auto channel = active.channel.lock()) channel->push(std::move(out));
  {
    std::lock_guard lock(stats_mutex_);
    ++stats_.generated_tokens;
    if (finished) ++stats_.requests_finished;
  }
  if (finished) finish_request(sequence.request_id);
}

}  // namespace tachyon::engine
