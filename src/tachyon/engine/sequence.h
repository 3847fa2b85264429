// Sequence: the engine's state of one completion. A request with n > 1 becomes n sequences.
// The scheduler's one idea (after vLLM v1): num_computed_tokens catches up with tokens.size();
// prefill, chunked prefill, a prefix-cache hit, decode and recompute after preemption are all
// the same subtraction, with no phases to track.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "tachyon/engine/kv_cache_manager.h"
#include "tachyon/core/sampling_params.h"

namespace tachyon::structured {
class Matcher;  // structured/matcher.h
}

namespace tachyon::engine {

struct FairShare;  // engine/fair_shares.h

enum class SequenceStatus { kWaiting, kRunning, kFinished };
enum class FinishReason { kNone, kStop, kLength, kAbort };

const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", ""

struct Sequence {
  int64_t id = 0;                 // unique per engine, never reused
  int64_t request_id = 0;         // the request it belongs to (shared by its n sequences)
  int32_t index = 0;              // which of the request's n completions
  int64_t arrival = 0;            // submission order, for FCFS
  std::shared_ptr<const core::SamplingParams> params;
  uint64_t seed = 0;              // the user's seed (+ index), or one the engine drew
  std::vector<int32_t> tokens;    // prompt, then generated tokens
  int64_t num_prompt_tokens = 0;
  int64_t num_computed_tokens = 0;  // tokens whose K/V are in the cache
  // Asynchronous scheduling: what launched steps not yet applied (update()) will add. Their
  // tokens' K/V is being computed, and each of them that samples this sequence adds a token the
  // host does not know yet; the next plan decodes it through a deferred token
  // (core/step_plan.h), taken from the last launched step's sampled row `last_sampled_row`.
  // All zero in the synchronous loop, where every step is applied before the next is planned.
  int64_t num_inflight_tokens = 0;
  int64_t num_pending_outputs = 0;
  int64_t last_sampled_row = -1;
  std::vector<int32_t> block_table;
  // Proposed continuations for its next decode step (set by a drafter before schedule(); the
  // scheduler plans what fits and clears them). Never part of `tokens` until the runner accepts them.
  std::vector<int32_t> draft_tokens;
  std::vector<BlockHash> block_hashes;  // chained hashes of the full blocks of `tokens`
  size_t num_cached_blocks = 0;         // blocks already named in the prefix cache
  SequenceStatus status = SequenceStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t stop_token = -1;              // the token that stopped it, when one did
  std::vector<Sequence*> pending_forks;  // siblings (n > 1) admitted once this prompt is computed
  int64_t num_prefix_hit_tokens = 0;    // prompt tokens served from the prefix cache (last admission)
  int64_t num_preemptions = 0;
  // Its client's share under the fair policy while it counts there (engine/fair_shares.h): the
  // scheduler reads the client's service through it without a lookup.
  FairShare* fair_share = nullptr;
  // Structured outputs: its position in params->structured's grammar, advanced by every token it
  // accepts (engine/structured_masks.h); null when unconstrained. Shared only so that this
  // header needs no definition of Matcher.
  std::shared_ptr<structured::Matcher> matcher;
  // When the scheduler first gave it KV blocks: queue time ends, prefill begins (metrics).
  std::optional<std::chrono::steady_clock::time_point> first_scheduled;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  // Tokens it will have, and tokens whose K/V will be cached, once the launched steps are applied.
  int64_t num_planned_tokens() const { return num_tokens() + num_pending_outputs; }
  int64_t num_scheduled_tokens() const { return num_computed_tokens + num_inflight_tokens; }
  // Its next step computes exactly one token: a decode.
  bool decoding() const { return num_planned_tokens() - num_scheduled_tokens() == 1; }
  bool finished() const { return status == SequenceStatus::kFinished; }
};

}  // namespace tachyon::engine
