// Sampler: turns one sequence's logits into its next token, following its core::SamplingParams.
// This is the CPU reference: plain loops over the vocabulary; a device sampler must match it.
//
// Order of operations (as vLLM):
//   0. sanitize: NaN -> -inf, +inf -> the largest float (a broken row must still sample or fail
//      loudly, never return garbage). Then structured outputs' mask: tokens the grammar refuses
//      -> -inf, before everything else, so greedy, seeded draws and the reported logprobs all
//      see only what the grammar allows (as vLLM applies its bitmask to the logits).
//   1. raw logprobs (only when params.logprobs >= 0): log-softmax of the logits as they came from
//      the model, before any penalty, temperature or filter; the sampled token's logprob and the
//      top params.logprobs are reported from these.
//   2. min_tokens: while output_tokens.size() < min_tokens, stop_token_ids and (unless ignore_eos,
//      when EOS does not stop anyway) eos_token_id are set to -inf.
//   3. penalties: repetition (HF: tokens of prompt or output, each once: positive logits divided,
//      others multiplied), then frequency (minus penalty * count in output), then presence
//      (minus penalty once for each token present in output).
//   4. greedy (temperature 0): argmax, ties to the lowest id. Done.
//   5. temperature: logits / temperature (after subtracting the max, which softmax ignores).
//   6. top-k: keep the k largest logits (ties to the lower id, so top_k=1 is exactly greedy).
//   7. top-p: keep the smallest most-likely set whose probability (renormalized over what
//      top-k kept) reaches top_p.
//   8. min-p: drop tokens whose probability is below min_p * p(most likely).
//      (vLLM v1 applies min-p before top-k/top-p; HF and vLLM v0 apply it last, as here.)
//   9. softmax over the kept tokens and one inverse-CDF draw, walking ids in ascending order.
//
// The draw is stateless and batch-invariant: its uniform number is a pure function of
// (seed, output_tokens.size()) (uniform_for_step), so a seeded request samples the same tokens
// whatever else shares its batch, and there is no generator state to carry or restore after
// preemption. A device sampler must use the same function and the same id-order walk.
//
// Tests: tests/unit/test_sampler.cpp (ctest -R sampler).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tachyon/core/sampled_token.h"
#include "tachyon/core/sampling_params.h"

namespace tachyon::kernels::cpu {

struct SamplingContext {
  std::span<const int32_t> prompt_tokens;   // [num_prompt_tokens] ids, for the repetition penalty
  std::span<const int32_t> output_tokens;   // [num_output_tokens] ids generated so far (penalties, min_tokens, step)
  uint64_t seed = 0;                        // the request's seed (the engine draws one when the user gives none)
  std::optional<int32_t> eos_token_id;      // masked while too few outputs (see step 2 above)
  // Outputs so far when output_tokens is left empty because no penalty reads it (a plan copies
  // histories only for penalties); -1: output_tokens.size().
  int64_t num_output_tokens = -1;
  // [ceil(vocab / 32)] words, bit (id % 32) of word (id / 32) set: id allowed (structured
  // outputs, core/step_plan.h); empty: every id.
  std::span<const uint32_t> allowed_tokens;

  uint64_t outputs_so_far() const {
    return num_output_tokens >= 0 ? static_cast<uint64_t>(num_output_tokens) : output_tokens.size();
  }
};

// logits: [vocab] f32 of one sequence; used as scratch (modified). Throws tachyon::Error when a
// token id is outside the vocabulary or when no token is left with a finite logit.
core::SampledToken sample_token(std::span<float> logits, const core::SamplingParams& params, const SamplingContext& context);

// --- The steps, one function each (exposed for tests and for the device sampler to mirror). ---
// In all of them, logits: [vocab] f32 without NaN or +inf (sample_token sanitizes first), and a
// dropped token is one whose logit is -inf.

// The uniform number in [0, 1) (53 random bits) of the draw at `step` of a request with `seed`.
double uniform_for_step(uint64_t seed, uint64_t step);

// Step 0 (after sanitizing): -inf on every id whose bit in `allowed` is clear; ids past the
// mask's words are dropped too. No-op when `allowed` is empty.
void apply_allowed_tokens(std::span<float> logits, std::span<const uint32_t> allowed);

// Step 2: -inf on the stop ids and EOS while output_tokens.size() < params.min_tokens.
void apply_min_tokens(std::span<float> logits, const core::SamplingParams& params, const SamplingContext& context);

// Step 3: repetition, frequency and presence penalties.
void apply_penalties(std::span<float> logits, const core::SamplingParams& params, std::span<const int32_t> prompt_tokens,
                     std::span<const int32_t> output_tokens);

// Step 4: index of the largest logit, ties to the lowest id; -1 when none is finite.
int32_t argmax_token(std::span<const float> logits);

// Step 5: (logit - max logit) / temperature for every kept token, clamped at -FLT_MAX. The shift
// leaves the softmax unchanged and keeps a tiny temperature from overflowing (its limit is greedy).
void apply_temperature(std::span<float> logits, float temperature);

// Step 6: keeps the top_k largest (ties to the lower id); no-op when top_k is 0 or >= kept count.
void apply_top_k(std::span<float> logits, int32_t top_k);

// Step 7: keeps the smallest most-likely set whose softmax probability reaches top_p (at least one).
void apply_top_p(std::span<float> logits, float top_p);

// Step 8: drops tokens with probability < min_p * p(most likely); no-op when min_p is 0.
void apply_min_p(std::span<float> logits, float min_p);

// Step 9: softmax over the finite logits, then the first id (ascending) whose cumulative
// probability exceeds `uniform` (in [0, 1)). Overwrites logits with unnormalized probabilities.
int32_t draw_token(std::span<float> logits, double uniform);

}  // namespace tachyon::kernels::cpu
