// SpeculativeConfig: which drafter proposes draft tokens and how many (issue 17). Part of the one
// typed EngineConfig tree: EngineCore builds its drafter from it (engine/drafter.h), the runner
// factory refuses it where the runner cannot verify drafts, and the metrics bound their
// per-position series by num_speculative_tokens. Names as vLLM's --speculative-config keys
// (method, num_speculative_tokens, prompt_lookup_min / max).
#pragma once

#include <cstdint>
#include <string>

namespace tachyon::core {

// The most drafts one sequence carries in a step (--num-speculative-tokens 1..16).
inline constexpr int32_t kMaxSpeculativeTokens = 16;

struct SpeculativeConfig {
  std::string method;                  // "" (off), "ngram", "draft" or "mtp" (the model's own MTP modules)
  int32_t num_speculative_tokens = 0;  // k: drafts proposed per sequence and step, 1..16
  // N-gram (prompt lookup): the last n tokens, n from ngram_max down to ngram_min, are looked up
  // in the sequence. 0: unset, resolved as vLLM resolves prompt_lookup_min / max (both unset: 5
  // and 5; one set: the other equals it).
  int32_t ngram_min = 0;
  int32_t ngram_max = 0;
  // Draft model (method "draft"): a model directory with the target's vocabulary; it runs on the
  // target's device with its own paged KV cache (engine/draft_model_drafter.h).
  std::string draft_model;
  // Benchmarks only: accept each draft with this probability instead of verifying it (the output
  // is then not the model's; runner/draft_acceptance.h). < 0: exact verification.
  float forced_acceptance = -1.0f;

  bool enabled() const { return !method.empty(); }
};

}  // namespace tachyon::core
