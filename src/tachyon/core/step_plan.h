// StepPlan: everything a runner needs for one step, built once on the host by the scheduler.
// Token-major arrays cover the ragged batch flattened in sequence order; per-sequence entries
// say which slice is whose. A runner turns it into device inputs with one upload and never
// reads back anything but the sampled tokens.
//
// The plan owns its values: nothing in it points into engine state, so a runner may keep it
// (or what it needs of it) while the engine goes on to change its sequences and plan the next
// step (ModelRunner::launch / wait). Token histories travel only when a penalty reads them.
//
// Draft tokens: a decoding sequence may carry k proposed continuations of its last known token.
// They are the last k of its slice of token_ids (so the step computes their K/V in lookahead
// slots) and add k logits rows; the runner verifies them and returns 1 + accepted tokens
// (core/step_output.h). The scheduler takes back the slots of rejected drafts.
//
// Deferred tokens (asynchronous scheduling): the engine may plan step n+1 while step n runs. A
// sequence that step n samples then decodes, in step n+1, a token nobody on the host knows yet;
// its entry in token_ids is a placeholder (0) and deferred_tokens names where the runner takes
// the real one: the token step n sampled in its sampled row `sampled_index` (plan order). Every
// runner resolves them before the step's forward (on the device, the CUDA runner).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tachyon/core/sampling_params.h"

namespace tachyon::core {

// A structured-output mask (ScheduledSequence::allowed_tokens); null allows every token.
using AllowedTokens = std::shared_ptr<const std::vector<uint32_t>>;

struct ScheduledSequence {
  int64_t sequence_id = 0;
  int64_t first_token = 0;        // index of its first token in StepPlan::token_ids
  int64_t num_tokens = 0;         // tokens computed this step, its drafts included
  int64_t num_computed = 0;       // tokens already in the KV cache before this step
  std::vector<int32_t> block_table;  // [ceil((num_computed + num_tokens) / block_size)] block ids
  bool sample = false;            // this step reaches its last known token: sample the next one
  // The token after its slice when the slice stops short of its last known token (a chunk of a
  // longer prompt); -1 otherwise. An MTP module on the runner reads it (its row at the chunk's
  // last position embeds it).
  int32_t next_token = -1;
  // [k] proposed tokens after the last known one; also the last k of its token_ids slice, each
  // with a logits row after the last known token's row. Empty: a plain step.
  std::vector<int32_t> draft_tokens;
  // Sampling inputs (set when `sample`), owned by the plan.
  std::shared_ptr<const SamplingParams> params;
  uint64_t seed = 0;
  int64_t num_output_tokens = 0;       // outputs before this step: the draw's step index, min_tokens
  std::vector<int32_t> prompt_tokens;  // [num_prompt_tokens] only when params->penalizes_prompt()
  std::vector<int32_t> output_tokens;  // [num_output_tokens] only when params->penalizes_outputs()
  std::optional<int32_t> eos_token_id;
  // Structured outputs: [ceil(vocab / 32)] bit (id % 32) of word (id / 32) set when token id may
  // be sampled (EOS and stop ids included where the grammar may end); null: no constraint. Set by
  // the engine after schedule() for sampled sequences with a constraint (never with drafts);
  // shared with the grammar's mask cache, so read only.
  AllowedTokens allowed_tokens;
  // Structured outputs with asynchronous scheduling: the sequence samples under a mask that
  // depends on the token the step before this one samples, which the host learns only after
  // launching this step. allowed_tokens is then null, and the engine hands the mask over after
  // launch (ModelRunner::supply_token_masks); the runner starts the step's forward meanwhile.
  bool mask_follows = false;

  int64_t num_draft_tokens() const { return static_cast<int64_t>(draft_tokens.size()); }
};

// token_ids[token_index] is the token the previously launched step sampled in its row
// `sampled_index` (its sampled sequences in plan order, one token each: no drafts there).
struct DeferredToken {
  int64_t token_index = 0;
  int64_t sampled_index = 0;
};

struct StepPlan {
  int32_t block_size = 0;
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int64_t> positions;     // [num_tokens]
  std::vector<int64_t> slot_mapping;  // [num_tokens] block_id * block_size + offset of each token's K/V
  // [num_logits_rows] rows of token_ids to sample from, in sequence order: one per sampled
  // sequence, then one more per draft token it carries.
  std::vector<int64_t> logits_rows;
  std::vector<ScheduledSequence> sequences;
  std::vector<int64_t> preempted;     // sequence ids preempted while planning this step
  std::vector<DeferredToken> deferred_tokens;  // placeholders in token_ids (see above)
  // Benchmarks only: accept each draft with this probability (a keyed draw, runner/draft_acceptance.h)
  // instead of by token equality; < 0 (the default) verifies exactly.
  float forced_acceptance = -1.0f;
  // Asks the runner for StepOutput::hidden_states (an MTP drafter reads them; engine/mtp_drafter.h).
  // Only the CPU runner returns them; the others refuse a plan that asks.
  bool return_hidden_states = false;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  bool empty() const { return sequences.empty(); }
  bool has_drafts() const;
};

inline bool StepPlan::has_drafts() const {
  for (const ScheduledSequence& s : sequences) {
    if (!s.draft_tokens.empty()) return true;
  }
  return false;
}

}  // namespace tachyon::core
