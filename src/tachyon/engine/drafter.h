// Drafter: proposes draft tokens for decoding sequences before each step (n-gram lookup, a draft
// model and MTP heads are drafters; the speculative-decoding work builds them). The engine asks
// it for every running sequence whose next step is a decode; the scheduler plans what fits and
// the runner verifies them, so a drafter affects speed only, never the tokens.
// make_drafter() builds the one core::SpeculativeConfig names; EngineCore calls it at
// construction. Tests: tests/unit/test_ngram_drafter.cpp, test_engine_drafts.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tachyon/core/speculative_config.h"

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
};

// Why a runner that cannot verify drafts refuses speculative decoding (the tensor-parallel CUDA
// runner, for now).
inline constexpr const char* kDraftsNeedVerifyingRunner =
    "this runner does not verify draft tokens: speculative decoding needs a single-GPU or CPU runner for now";

// `config` with unset n-gram sizes filled as vLLM fills prompt_lookup_min / max, checked: an
// Error naming the command-line flag for an unknown method, a method not built yet (mtp), k
// outside 1..kMaxSpeculativeTokens, n-gram sizes out of order, draft without --draft-model (or
// --draft-model without draft), a forced acceptance outside [0, 1]. Off stays off.
core::SpeculativeConfig resolve_speculative_config(core::SpeculativeConfig config);

// The drafter `config` names (resolved first) when it needs no model: the n-gram drafter;
// nullptr when speculation is off. A draft model is loaded by the runner factory
// (app::load_runner), which builds its DraftModelDrafter; asked for one here: Error.
std::unique_ptr<Drafter> make_drafter(const core::SpeculativeConfig& config);

}  // namespace tachyon::engine
