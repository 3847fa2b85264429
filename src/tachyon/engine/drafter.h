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

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Proposed continuations of `tokens` (the sequence's prompt and outputs); empty: none.
  virtual std::vector<int32_t> propose(int64_t sequence_id, std::span<const int32_t> tokens) = 0;
};

// Why a runner that cannot verify drafts refuses speculative decoding (the CUDA runners, for now).
inline constexpr const char* kDraftsNeedVerifyingRunner =
    "this runner does not verify draft tokens: speculative decoding needs the CPU runner for now";

// `config` with unset n-gram sizes filled as vLLM fills prompt_lookup_min / max, checked: an
// Error naming the command-line flag for an unknown method, a method not built yet (draft,
// mtp), k outside 1..kMaxSpeculativeTokens or n-gram sizes out of order. Off stays off.
core::SpeculativeConfig resolve_speculative_config(core::SpeculativeConfig config);

// The drafter `config` names (resolved first); nullptr when speculation is off.
std::unique_ptr<Drafter> make_drafter(const core::SpeculativeConfig& config);

}  // namespace tachyon::engine
