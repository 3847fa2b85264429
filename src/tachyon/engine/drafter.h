// Drafter: proposes draft tokens for decoding sequences before each step (n-gram lookup, a draft
// model and MTP heads are drafters; the speculative-decoding work builds them). The engine asks
// it for every running sequence whose next step is a decode; the scheduler plans what fits and
// the runner verifies them, so a drafter affects speed only, never the tokens.
// make_drafter() builds the one core::SpeculativeConfig names; EngineCore calls it at
// construction. A drafter that reads the model's hidden states (MTP, engine/mtp_drafter.h) says
// so (needs_hidden_states): the engine then asks the runner for them in every step and shows it
// every applied step (observe). Tests: tests/unit/test_ngram_drafter.cpp, test_engine_drafts.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tachyon/core/speculative_config.h"
#include "tachyon/core/step_output.h"
#include "tachyon/core/step_plan.h"

namespace tachyon::engine {

// One sequence's turn in a batched proposal.
struct DraftRequest {
  int64_t sequence_id = 0;
  std::span<const int32_t> tokens;  // its prompt and outputs so far
  std::vector<int32_t> drafts;      // out: its proposed continuation (empty: none)
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Proposed continuations of `tokens` (the sequence's prompt and outputs); empty: none.
  virtual std::vector<int32_t> propose(int64_t sequence_id, std::span<const int32_t> tokens) = 0;
  // Every decoding sequence of the next step at once (a draft model runs them as one batch);
  // by default one propose() each.
  virtual void propose_batch(std::span<DraftRequest> requests) {
    for (DraftRequest& r : requests) r.drafts = propose(r.sequence_id, r.tokens);
  }
  // The sequence is gone (finished or aborted): a drafter with per-sequence state frees it.
  virtual void release(int64_t /*sequence_id*/) {}
  // Whether observe() needs StepOutput::hidden_states: the engine then sets every plan's
  // return_hidden_states.
  virtual bool needs_hidden_states() const { return false; }
  // Every step the engine runs, after the scheduler applied its output (so `output` holds what
  // was applied: 1 + accepted tokens, trimmed at a stop; empty for a sequence nothing applied
  // to): prefill chunks, decodes with drafts, recompute after preemption.
  virtual void observe(const core::StepPlan& /*plan*/, const core::StepOutput& /*output*/) {}

  // Prefill/decode disaggregation. A drafter whose state of a sequence can move with its prompt's
  // KV (MTP: the modules' rows of the prompt and the first drafts) may run on a prefill engine,
  // which hands the state of each prompt it ran to the lease (export_state, after observing the
  // step that sampled the first token); a decode engine's drafter takes it up with the imported
  // sequence (import_state: `tokens` its prompt and first token). An import that does not fit
  // (another model, damaged bytes) returns false and keeps nothing: the drafter then
  // starts where the sequence is, as for a prompt it never saw. Either way the tokens are the
  // target's (drafts are verified); the state only lets the first drafts see the prompt.
  virtual bool moves_state_with_kv() const { return false; }
  virtual std::string export_state(int64_t /*sequence_id*/) const { return {}; }
  virtual bool import_state(int64_t /*sequence_id*/, std::span<const int32_t> /*tokens*/,
                            const std::string& /*state*/) {
    return false;
  }
};

// Why a runner that cannot verify drafts refuses speculative decoding (the tensor-parallel CUDA
// runner, for now).
inline constexpr const char* kDraftsNeedVerifyingRunner =
    "this runner does not verify draft tokens: speculative decoding needs a single-GPU or CPU runner for now";

// `config` with unset n-gram sizes filled as vLLM fills prompt_lookup_min / max, checked: an
// Error naming the command-line flag for an unknown method, k outside 1..kMaxSpeculativeTokens,
// n-gram sizes out of order or given to another method, draft without --draft-model (or
// --draft-model without draft), a forced acceptance outside [0, 1]. Off stays off.
core::SpeculativeConfig resolve_speculative_config(core::SpeculativeConfig config);

// The drafter `config` names (resolved first) when it needs no model: the n-gram drafter;
// nullptr when speculation is off. A draft model or MTP modules are loaded by the runner factory
// (app::load_runner), which builds its DraftModelDrafter or MtpDrafter; asked for one here: Error.
std::unique_ptr<Drafter> make_drafter(const core::SpeculativeConfig& config);

}  // namespace tachyon::engine
