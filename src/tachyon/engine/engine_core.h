// EngineCore: the step loop. Any thread may submit() or abort(); one engine thread (start())
// or the caller (step(), for tests) runs
//     drain submits and aborts -> reap abandoned requests -> schedule -> execute -> update -> deliver
// With asynchronous scheduling (EngineConfig::async_scheduling) a step plans and launches step
// n+1 before it waits for and applies step n, so a device runner never idles on the host.
// Requests exist in the engine only while they run: a finished request leaves no entry in
// any container, so nothing grows with the number of requests served.
// A step that throws fails the engine for good (engine/engine_failure.h): every request ends
// with the failure's message, later submits throw EngineFailedError, and the loop stops.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "tachyon/base/check.h"
#include "tachyon/core/engine_config.h"
#include "tachyon/engine/drafter.h"
#include "tachyon/engine/engine_failure.h"
#include "tachyon/engine/kv_copier.h"
#include "tachyon/engine/kv_cache_manager.h"
#include "tachyon/engine/kv_transfer.h"
#include "tachyon/engine/output_channel.h"
#include "tachyon/engine/scheduler.h"
#include "tachyon/runner/model_runner.h"

namespace tachyon::engine {

// The waiting queue is full: the caller should retry later (HTTP 503).
class QueueFullError : public Error {
 public:
  using Error::Error;
};

struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t num_active_requests = 0;    // requests with an entry in the engine (live ones only)
  int64_t num_live_sequences = 0;
  int32_t kv_blocks_free = 0;
  int32_t kv_blocks_total = 0;
  int64_t steps = 0;
  int64_t prompt_tokens_computed = 0;   // prompt tokens the model actually ran (prefix hits excluded)
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t requests_finished = 0;
  int64_t requests_aborted = 0;
  int64_t draft_tokens = 0;           // draft tokens verified (planned with their sequence)
  int64_t draft_tokens_accepted = 0;  // of those, accepted
  int64_t num_drafts = 0;             // sequence steps that carried at least one draft
  // [kMaxSpeculativeTokens]: drafts accepted at position i of their step's drafts (position i
  // is accepted only if 0..i-1 were). Mean acceptance length = 1 + accepted / num_drafts.
  std::array<int64_t, core::kMaxSpeculativeTokens> draft_tokens_accepted_per_position{};
  int32_t num_speculative_tokens = 0;  // k of the configured drafter (0: none); bounds the per-position series
  KvCacheStats kv;
  // Decode role, imports by reference (engine/kv_transfer.h): rows copied out of the source's
  // cache, the seconds those copies took with their confirmations (on the copier's thread,
  // engine/kv_copier.h), and imports whose copy the source did not confirm (their prompts were
  // computed here instead).
  int64_t kv_reference_imports = 0;
  int64_t kv_reference_bytes = 0;
  double kv_reference_copy_seconds = 0.0;
  int64_t kv_reference_unconfirmed = 0;
  // Decode role with a drafter whose state moves with the KV (MTP, engine/drafter.h): imports
  // whose drafter state it took up, and those whose state did not fit (drafting started afresh).
  int64_t draft_states_imported = 0;
  int64_t draft_states_refused = 0;
  bool failed = false;  // a step threw: the engine serves no more requests (failure() says why)
};

class EngineCore {
 public:
  // `drafter`: the one config.speculative names when it needs a model (the runner factory loads
  // it: app::LoadedRunner::drafter); null: the constructor builds a model-free one (n-gram) from
  // config.speculative, or none.
  EngineCore(const core::EngineConfig& config, std::unique_ptr<runner::ModelRunner> runner,
             std::unique_ptr<Drafter> drafter = nullptr);
  ~EngineCore();
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // Thread-safe. Validates the prompt and params (throws Error with a message for the user,
  // QueueFullError, or EngineFailedError once the engine has failed) and queues the request;
  // outputs go to `channel`, which the caller owns.
  int64_t submit(std::vector<int32_t> prompt, const core::SamplingParams& params, const std::shared_ptr<OutputChannel>& channel);
  // Thread-safe. Aborts the whole request, or only its completion `index` (a consumer that saw
  // a stop string in that completion). Unknown or finished ids are ignored.
  void abort(int64_t request_id, std::optional<int32_t> index = std::nullopt);

  // Called on the engine thread after every step that ran, with the tokens it computed (for the
  // tokens-per-step histogram). Set before start(); must be quick.
  void set_step_observer(std::function<void(int64_t num_tokens)> observer) { step_observer_ = std::move(observer); }
  // Called on the engine thread after each turn of its loop: `worked` when a step ran, false when
  // it found nothing to do and waits for work (a server gives freed memory back then: base/heap_trim.h).
  // Set before start().
  void set_loop_observer(std::function<void(bool worked)> observer) { loop_observer_ = std::move(observer); }

  // Proposes draft tokens before every step. Set before start(); refused (Error) when the runner
  // cannot verify drafts. The constructor sets the one it is given or config.speculative names.
  void set_drafter(std::unique_ptr<Drafter> drafter);

  // Thread-safe. Aborts every request in the engine at its next step (server shutdown).
  void abort_all();

  // Prefill/decode disaggregation (engine/kv_transfer.h; defined in engine_core_kv.cpp).
  // Thread-safe. Runs the prompt and samples one token (delivered as a finished completion), then
  // leases the prompt's KV blocks under {kv_epoch(), request id}. One prompt, n = 1, no grammar.
  int64_t submit_prefill(std::vector<int32_t> prompt, const core::SamplingParams& params,
                         const std::shared_ptr<OutputChannel>& channel);
  // Thread-safe. Copies a lease's rows out and releases it (KvTransferError: no such lease).
  KvPayload export_kv(KvLeaseKey key);
  void release_kv(KvLeaseKey key);  // thread-safe; unknown keys are ignored
  // Thread-safe. A lease's rows as the prompt writes them (KvLeases::read_stream); `listener`
  // runs on the engine thread whenever a stream grows (any thread; nullptr stops the calls).
  // By reference, the chunks name blocks and the taken stream's blocks stay pinned until
  // release_kv_hold() (engine/kv_transfer.h); true when they were still held.
  KvStreamRead read_kv_stream(KvLeaseKey key, size_t from, bool claim, bool by_reference = false);
  bool release_kv_hold(KvLeaseKey key, bool copied);
  // The runner cache's by-reference fingerprint and descriptor (runner/model_runner.h
  // KvRowAccess); "" when it cannot be mapped by another process. Thread-safe.
  std::string kv_reference_fingerprint();
  std::string kv_reference_descriptor();
  void set_kv_stream_listener(std::function<void()> listener) { leases_.set_listener(std::move(listener)); }
  uint64_t kv_epoch() const { return leases_.epoch(); }
  void set_kv_lease_timeout(std::chrono::milliseconds timeout) { leases_.set_timeout(timeout); }
  // Blocks that leases and running prefills may hold at once; past it submit_prefill throws
  // KvLeasesFullError (engine/kv_transfer.h).
  void set_kv_lease_max_blocks(int64_t max_blocks) { leases_.set_max_blocks(max_blocks); }
  KvLeaseStats kv_lease_stats() { return leases_.stats(); }  // thread-safe
  // Thread-safe. The prefix cache's block hashes as of the engine's last refresh, which this call
  // asks for at its next step (a router's scrape sees what the previous one asked for).
  std::vector<BlockHash> published_prefix_hashes();
  int32_t block_size() const { return kv_.block_size(); }
  // Thread-safe. Admits a request whose prompt and first token come with `payload`: its KV is
  // written, not computed, and the first token is delivered at once. Throws KvTransferError when
  // the payload does not fit this engine's cache (the caller recomputes instead).
  int64_t submit_imported(KvPayload payload, const core::SamplingParams& params,
                          const std::shared_ptr<OutputChannel>& channel);

  void start();  // runs the loop on an engine thread until stop()
  void stop();
  // One iteration on the calling thread (only when start() was not called); false when there
  // was nothing to do. With asynchronous scheduling a step delivers the previous step's tokens.
  // A step that throws fails the engine (fail()) and then rethrows to its caller; a failed
  // engine's step() does nothing and returns false.
  bool step();
  // Thread-safe. Why the engine failed (engine_failure_message of what its step threw); nullopt
  // while it serves.
  std::optional<std::string> failure();
  bool async_scheduling() const { return overlap_; }  // as resolved from the config and runner
  bool has_work();      // same thread as step()
  EngineStats stats();  // the snapshot published after the last step, safe from any thread

 private:
  struct Submission {
    int64_t request_id;
    std::vector<int32_t> prompt;
    std::shared_ptr<const core::SamplingParams> params;
    std::weak_ptr<OutputChannel> channel;
    bool export_kv = false;                   // submit_prefill
    std::shared_ptr<const KvPayload> imported;  // submit_imported
  };
  struct ActiveRequest {
    std::weak_ptr<OutputChannel> channel;
    std::vector<std::unique_ptr<Sequence>> sequences;
    int64_t num_unfinished = 0;
    bool logprobs = false;
  };

  // submit() with what disaggregation adds: a prefill-only request, or imported KV.
  int64_t submit(std::vector<int32_t> prompt, const core::SamplingParams& params,
                 const std::shared_ptr<OutputChannel>& channel, bool export_kv, std::shared_ptr<const KvPayload> imported);
  void drain_inbox();
  void admit(Submission&& submission);
  void admit_imported(Submission&& submission);  // engine_core_kv.cpp, as are the four below
  void start_pending_imports();
  void start_imported(Sequence& sequence, const std::shared_ptr<const KvPayload>& payload);
  void deliver_imported(Sequence& sequence, const KvPayload& payload);
  void finish_copies();  // the copier's results: start the confirmed, compute the others
  void wait_for_copies(std::chrono::milliseconds at_most);
  // A prefill-only sequence whose first token a step sampled: its prompt's blocks, retained for
  // the lease before update() drops the sequence's own references, granted once the drafter has
  // seen the step (so the lease carries the drafter's state of the prompt).
  struct PrefilledLease {
    int64_t request_id = 0;
    int64_t sequence_id = 0;
    std::vector<int32_t> blocks;
    std::vector<int32_t> prompt;
    int32_t first_token = -1;
    uint64_t seed = 0;
    int64_t cached_tokens = 0;  // the prompt tokens the prefix cache served (the client's usage)
  };
  std::vector<PrefilledLease> lease_prefilled(const core::StepPlan& plan, const core::StepOutput& output);
  void grant_prefilled(std::vector<PrefilledLease> leases);
  void stage_prompt_rows(const Sequence& sequence, int64_t computed, bool whole);
  void release_leases();
  void publish_prefix_hashes();
  int64_t lease_blocks(int64_t num_prompt_tokens) const;  // the blocks a prompt's lease holds
  // `index`: only that completion; `reason`: the engine's own, for the client (CompletionDelta::abort_reason).
  void abort_request(int64_t request_id, std::optional<int32_t> index = std::nullopt, const std::string& reason = "");
  void reap_abandoned();
  void propose_drafts();
  void apply_step(const core::StepPlan& plan);
  void deliver(const core::StepPlan& plan, const core::StepOutput& output);
  void finish_request(int64_t request_id);
  bool run_step();  // step()'s body
  // Engine thread: records the failure (so submit() refuses from now on), ends every queued and
  // running request with RequestOutput::error, and gives their KV blocks back.
  void fail(const std::string& what);
  void fail_queued(std::vector<Submission>& submissions, const std::string& message);
  void loop();
  void publish_stats();
  int64_t num_waiting() const {
    return scheduler_.num_waiting() + static_cast<int64_t>(pending_imports_.size()) + copies_in_flight_;
  }
  void count_step(const core::StepPlan& plan, const core::StepOutput& output);

  core::EngineConfig config_;
  std::unique_ptr<runner::ModelRunner> runner_;
  std::unique_ptr<Drafter> drafter_;
  KvCacheManager kv_;
  Scheduler scheduler_;
  KvLeases leases_;  // prefill role: KV blocks held for a decode server
  struct PendingImport {
    int64_t sequence_id;
    std::shared_ptr<const KvPayload> payload;
  };
  std::deque<PendingImport> pending_imports_;  // decode role: admitted, waiting for a slot and blocks
  int64_t copies_in_flight_ = 0;  // engine thread: handed to the copier (below), result not yet taken
  std::atomic<bool> prefix_hashes_wanted_{false};
  std::mutex prefix_hashes_mutex_;
  std::vector<BlockHash> prefix_hashes_;  // published for routers (engine_core_kv.cpp)
  bool overlap_ = false;                   // asynchronous scheduling, resolved at construction
  std::optional<core::StepPlan> in_flight_;  // launched, not yet applied (overlap_ only)

  // Engine-thread state.
  std::unordered_map<int64_t, ActiveRequest> active_;
  std::unordered_map<int64_t, Sequence*> sequences_;  // live sequences by id
  int64_t num_constrained_ = 0;  // live sequences with a grammar (structured outputs)
  int64_t next_sequence_id_ = 0;
  int64_t next_arrival_ = 0;
  uint64_t seed_state_ = 0x853c49e6748fea9bull;

  // Shared with submitting threads.
  std::mutex inbox_mutex_;
  std::condition_variable inbox_ready_;
  std::vector<Submission> inbox_;
  std::vector<std::pair<int64_t, std::optional<int32_t>>> abort_inbox_;
  std::atomic<int64_t> next_request_id_{1};
  std::atomic<bool> abort_all_{false};
  std::function<void(int64_t)> step_observer_;
  std::function<void(bool)> loop_observer_;
  std::atomic<int64_t> waiting_snapshot_{0};  // the scheduler's waiting count after the last step
  std::optional<std::string> failure_;        // under inbox_mutex_: set once, by fail()
  std::atomic<bool> failed_{false};           // failure_.has_value(), for the engine thread's checks

  std::mutex stats_mutex_;
  EngineStats stats_;

  std::thread thread_;
  std::atomic<bool> stopping_{false};
  // Decode role: copies by reference run on the copier's thread (engine/kv_copier.h), made at the
  // first one; their results wait in copies_done_ (under inbox_mutex_) for the engine thread.
  // Last, so that it stops (and its thread stops calling back) before the members it uses go.
  std::vector<KvCopier::Done> copies_done_;
  std::unique_ptr<KvCopier> copier_;
};

}  // namespace tachyon::engine
