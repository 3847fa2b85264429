// SamplingInputs: SamplingParams + ScheduledSequence -> kernel rows, and kernel results back.
// See sampling_inputs.h for where each field comes from.
#include "tachyon/runner/cuda/sampling_inputs.h"

#include <algorithm>
#include <limits>
#include <span>

#include "tachyon/base/check.h"

namespace tachyon::runner {

namespace kc = kernels::cuda;

namespace {

// Appends ids to tokens and returns where they start.
int32_t append(std::vector<int32_t>& tokens, std::span<const int32_t> ids) {
  const size_t begin = tokens.size();
  TACHYON_CHECK(begin + ids.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      << "sampling inputs: more than 2^31 history ids in one step";
  tokens.insert(tokens.end(), ids.begin(), ids.end());
  return static_cast<int32_t>(begin);
}

// The rows of one sampled sequence: row 0 samples after its last known token, row i (i = 1..k)
// after its drafts 0..i-1, as a plain decode step would once they were outputs. The rows share
// one copy of the history (prompt, outputs, then the drafts: row i reads the outputs and the
// first i drafts) and one copy of the masked ids, so drafts add k ids to the tail, not k copies.
void add_rows(const core::ScheduledSequence& sequence, SamplingInputs& inputs) {
  TACHYON_CHECK(sequence.params != nullptr) << "sequence " << sequence.sequence_id << " is sampled but has no params";
  const core::SamplingParams& p = *sequence.params;
  TACHYON_CHECK(p.logprobs >= -1 && p.logprobs <= kc::kMaxSampledLogprobs)
      << "sequence " << sequence.sequence_id << ": logprobs " << p.logprobs << " outside [-1, 20]";
  std::vector<int32_t>& tokens = inputs.tokens;
  kc::SamplingRow row;
  row.temperature = p.temperature;
  row.top_p = p.top_p;
  row.min_p = p.min_p;
  row.repetition_penalty = p.repetition_penalty;
  row.frequency_penalty = p.frequency_penalty;
  row.presence_penalty = p.presence_penalty;
  row.top_k = std::max(p.top_k, 0);
  row.num_logprobs = p.logprobs;
  row.seed = sequence.seed;
  row.step = static_cast<uint64_t>(sequence.num_output_tokens);
  // Structured outputs: the plan's mask, copied once; only row 0 exists (no drafts with a mask).
  if (sequence.allowed_tokens != nullptr) {
    TACHYON_CHECK(sequence.draft_tokens.empty())
        << "internal: sequence " << sequence.sequence_id << " has a token mask and drafts";
    const std::vector<uint32_t>& words = *sequence.allowed_tokens;
    if (inputs.allowed.empty()) inputs.allowed_words = static_cast<int32_t>(words.size());
    TACHYON_CHECK(static_cast<int32_t>(words.size()) == inputs.allowed_words)
        << "internal: token masks of " << words.size() << " and " << inputs.allowed_words << " words in one step";
    row.allowed_row = static_cast<int32_t>(inputs.allowed.size() / words.size());
    inputs.allowed.insert(inputs.allowed.end(), words.begin(), words.end());
  } else if (sequence.mask_follows) {
    TACHYON_CHECK(sequence.draft_tokens.empty())
        << "internal: sequence " << sequence.sequence_id << " has a token mask and drafts";
    row.allowed_row = inputs.late_masks++;
  }

  // Histories: the prompt counts only for the repetition penalty; outputs (and the drafts a
  // later row counts as outputs) for all three.
  const bool repetition = p.repetition_penalty != 1.0f;
  const bool any_penalty = repetition || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
  if (any_penalty) {
    TACHYON_CHECK(static_cast<int64_t>(sequence.output_tokens.size()) == sequence.num_output_tokens)
        << "internal: sequence " << sequence.sequence_id << " has a penalty but the plan holds "
        << sequence.output_tokens.size() << " of its " << sequence.num_output_tokens << " outputs";
    const std::span<const int32_t> prompt = repetition ? std::span<const int32_t>(sequence.prompt_tokens)
                                                       : std::span<const int32_t>{};
    row.history_begin = append(tokens, prompt);
    append(tokens, sequence.output_tokens);
    append(tokens, sequence.draft_tokens);
    row.num_prompt_tokens = static_cast<int32_t>(prompt.size());
    row.num_output_tokens = static_cast<int32_t>(sequence.output_tokens.size());
  }

  // min_tokens: stop ids and (unless ignore_eos, when EOS does not stop) EOS are masked in every
  // row whose output count is still below it (row 0's is the lowest).
  const int64_t min_tokens = std::max(p.min_tokens, 0);
  int32_t masked_begin = 0, num_masked = 0;
  if (sequence.num_output_tokens < min_tokens) {
    masked_begin = append(tokens, p.stop_token_ids);
    if (sequence.eos_token_id && !p.ignore_eos) tokens.push_back(*sequence.eos_token_id);
    num_masked = static_cast<int32_t>(tokens.size()) - masked_begin;
  }

  for (int64_t i = 0; i <= sequence.num_draft_tokens(); ++i) {
    kc::SamplingRow r = row;
    r.step = row.step + static_cast<uint64_t>(i);
    if (any_penalty) r.num_output_tokens = row.num_output_tokens + static_cast<int32_t>(i);
    if (sequence.num_output_tokens + i < min_tokens) r.masked_begin = masked_begin, r.num_masked = num_masked;
    inputs.rows.push_back(r);
  }
}

const char* describe(int32_t error) {
  switch (error) {
    case kc::kSamplingNoFiniteLogit: return "no token with a finite logit is left (NaN or -inf everywhere)";
    case kc::kSamplingBadTokenId: return "a history, stop or EOS token id is outside the vocabulary";
    default: return "unknown sampling error";
  }
}

}  // namespace

SamplingInputs build_sampling_inputs(const core::StepPlan& plan) {
  SamplingInputs inputs;
  for (const core::ScheduledSequence& sequence : plan.sequences) {
    TACHYON_CHECK(sequence.sample || sequence.draft_tokens.empty())
        << "internal: sequence " << sequence.sequence_id << " carries drafts but samples nothing";
    if (sequence.sample) add_rows(sequence, inputs);
  }
  TACHYON_CHECK(inputs.late_masks == 0 || inputs.allowed.empty())
      << "internal: a plan with token masks given and token masks that follow";
  return inputs;
}

core::SampledToken to_sampled_token(const kc::SampledRow& sampled, const kc::SamplingRow& row) {
  TACHYON_CHECK(sampled.error == kc::kSamplingOk && sampled.token >= 0)
      << "sampling failed: " << describe(sampled.error) << " (error " << sampled.error << ", step " << row.step << ")";
  core::SampledToken token;
  token.token = sampled.token;
  if (row.num_logprobs >= 0) token.logprob = sampled.logprob;
  const int32_t num_top = std::clamp(sampled.num_top, 0, kc::kMaxSampledLogprobs);
  for (int32_t i = 0; i < num_top; ++i) token.top.push_back({sampled.top_ids[i], sampled.top_logprobs[i]});
  return token;
}

}  // namespace tachyon::runner
