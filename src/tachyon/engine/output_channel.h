// OutputChannel: one request's outputs, owned by its consumer (DESIGN rule 1). The engine holds
// only a weak_ptr: when the consumer drops the channel (a client disconnects), the engine sees
// it expire and aborts the request within one step. Deltas that the consumer has not taken yet
// merge into one pending output, so a slow consumer costs memory proportional to its own
// request and never blocks the engine thread. There is no process-wide output queue.
//
// Two ways to consume: take() (blocking, from any thread) or a callback given at construction,
// which the engine thread calls with each delta (it must be quick and must not block).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tachyon/core/sampled_token.h"
#include "tachyon/engine/sequence.h"

namespace tachyon::engine {

// New output of one completion (sequence index) since the consumer last took.
struct CompletionDelta {
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::vector<core::SampledToken> logprobs;  // parallel to token_ids when the request asked for logprobs
  FinishReason finish_reason = FinishReason::kNone;  // set once, on the delta that finishes it
  int32_t stop_token = -1;
  // With kAbort: why the engine ended this completion by itself (its output constraint could not
  // be followed, structured_masks.h), a sentence for the client. "" when a consumer or shutdown
  // aborted it, or the engine failed (RequestOutput::error says why then).
  std::string abort_reason;
};

struct RequestOutput {
  int64_t request_id = 0;
  std::vector<CompletionDelta> completions;  // only the indices that changed
  bool finished = false;                     // every completion has finished
  int64_t num_prompt_tokens = 0;
  int64_t num_prefix_hit_tokens = 0;         // prompt tokens served from the prefix cache
  // When the request's first sequence was first scheduled (queue time ends); unset before.
  std::optional<std::chrono::steady_clock::time_point> first_scheduled;
  // Non-empty: the engine failed (engine/engine_failure.h) and this output ends the request, every
  // unfinished completion with kAbort; the message says why, for the client.
  std::string error;
};

class OutputChannel {
 public:
  using Callback = std::function<void(RequestOutput&&)>;
  OutputChannel() = default;
  explicit OutputChannel(Callback callback) : callback_(std::move(callback)) {}

  // Consumer side: waits up to `timeout` for output; returns everything pending, merged, or
  // nullopt on timeout. After the finished output has been taken, returns nullopt at once.
  std::optional<RequestOutput> take(std::chrono::milliseconds timeout = std::chrono::hours(24));

  // Engine side.
  void push(RequestOutput&& delta);
  bool has_callback() const { return static_cast<bool>(callback_); }

 private:
  static void merge(RequestOutput& into, RequestOutput&& delta);

  Callback callback_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::optional<RequestOutput> pending_;
  bool finished_taken_ = false;
};

}  // namespace tachyon::engine
