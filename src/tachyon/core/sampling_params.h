// SamplingParams: how one request turns logits into tokens and when it stops. Plain data,
// validated once at the door (validate()) so the engine thread never sees a bad value.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tachyon::structured {
class CompiledGrammar;  // structured/compiled_grammar.h; core only carries it
}

namespace tachyon::core {

// At most this many stop_token_ids per request: the GPU sampler stages the ids masked by
// min_tokens per row in a buffer sized up front (runner/cuda), so the count is bounded at the door.
inline constexpr size_t kMaxStopTokenIds = 1024;

struct SamplingParams {
  // The repetition penalty divides or multiplies a logit; within these bounds the result stays a
  // finite float for any logit under 1e32 in magnitude. Past them a tiny penalty made a logit
  // +inf (NaN after the temperature: uniform sampling) and a huge one -inf for every allowed token
  // (no token left: the engine failed).
  static constexpr float kMinRepetitionPenalty = 1e-6f;
  static constexpr float kMaxRepetitionPenalty = 1e6f;

  // temperature 0 means greedy (argmax); then top_k/top_p/min_p and the seed do not matter.
  float temperature = 1.0f;
  int32_t top_k = 0;        // 0: off; else keep the k most likely tokens
  float top_p = 1.0f;       // keep the smallest set whose probability reaches top_p
  float min_p = 0.0f;       // drop tokens below min_p * p(most likely)
  float presence_penalty = 0.0f;    // OpenAI: subtract once for every token already generated
  float frequency_penalty = 0.0f;   // OpenAI: subtract per occurrence in the generated tokens
  float repetition_penalty = 1.0f;  // HF/CTRL: divide positive (multiply negative) logits of tokens seen in prompt or output
  std::optional<uint64_t> seed;     // same seed, same tokens, whatever else is in the batch
  int32_t max_tokens = 16;
  int32_t min_tokens = 0;           // EOS and stop_token_ids are masked until this many are generated
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;    // stop strings, matched on detokenized text by the consumer
  bool include_stop_str_in_output = false;
  int32_t logprobs = -1;            // -1: none; N >= 0: the sampled token's logprob and the top N
  int32_t n = 1;                    // completions per prompt; they share the prompt's KV blocks
  int32_t priority = 0;             // lower runs first when the scheduler uses priorities
  // Whose share of the engine this request counts against when the scheduler is fair
  // (core/scheduler_config.h): requests with the same nonzero client share one; 0: its own.
  uint64_t client = 0;
  // Structured outputs (response_format json_schema, guided_*): the grammar every completion
  // must follow, compiled at the door (server/); null: unconstrained. The engine keeps one
  // matcher per sequence and puts each step's allowed-token mask in the plan.
  std::shared_ptr<const structured::CompiledGrammar> structured;

  bool greedy() const { return temperature == 0.0f; }
  // Which token histories the sampler reads: the prompt only for the repetition penalty, the
  // outputs for any penalty (the plan copies a history only when it is read).
  bool penalizes_prompt() const { return repetition_penalty != 1.0f; }
  bool penalizes_outputs() const { return penalizes_prompt() || frequency_penalty != 0.0f || presence_penalty != 0.0f; }

  // Throws tachyon::Error naming the field and the allowed range, or the combination refused
  // with a constraint (min_tokens and ignore_eos: both would force tokens past the grammar's end).
  void validate(int64_t vocab_size) const;
};

}  // namespace tachyon::core
