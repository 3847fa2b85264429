#include "tachyon/runner/plan_sampling.h"

#include <vector>

#include "tachyon/base/check.h"
#include "tachyon/kernels/sampling.h"
#include "tachyon/runner/draft_acceptance.h"

namespace tachyon::runner {

namespace {

// The tokens of one sampled sequence: row 0 after its last known token, row i after draft i.
core::SequenceOutput verify_sequence(const core::ScheduledSequence& s, std::span<float> logits, size_t first_row,
                                     int64_t vocab, float forced_acceptance) {
  TACHYON_CHECK(s.params != nullptr) << "sequence " << s.sequence_id << " is sampled but has no params";
  // A mask holds for the row after the last known token only; the engine never drafts for a
  // constrained sequence (engine/structured_masks.h).
  TACHYON_CHECK(s.allowed_tokens == nullptr || s.draft_tokens.empty())
      << "internal: sequence " << s.sequence_id << " has a token mask and drafts";
  TACHYON_CHECK(!s.mask_follows) << "internal: sequence " << s.sequence_id
                                 << " reached the sampler before its token mask (ModelRunner::supply_token_masks)";
  core::SequenceOutput out;
  out.sequence_id = s.sequence_id;
  out.num_draft_tokens = s.num_draft_tokens();
  // The outputs history grows by each accepted draft; it is copied only when a penalty reads it
  // and there are drafts to add (a plain step samples from the plan's own vector).
  const bool grows = s.params->penalizes_outputs() && s.num_draft_tokens() > 0;
  std::vector<int32_t> grown;
  if (grows) grown = s.output_tokens;
  std::span<const int32_t> outputs = s.output_tokens;
  for (int64_t i = 0; i <= s.num_draft_tokens(); ++i) {
    std::span<float> row(logits.data() + static_cast<int64_t>(first_row + static_cast<size_t>(i)) * vocab,
                         static_cast<size_t>(vocab));
    kernels::cpu::SamplingContext context{s.prompt_tokens, outputs, s.seed, s.eos_token_id,
                                          s.num_output_tokens + i};
    if (s.allowed_tokens != nullptr) context.allowed_tokens = *s.allowed_tokens;
    out.tokens.push_back(kernels::cpu::sample_token(row, *s.params, context));
    if (i == s.num_draft_tokens()) break;
    const int32_t draft = s.draft_tokens[static_cast<size_t>(i)];
    if (!accepts_draft(out.tokens.back().token, draft, s.seed, static_cast<uint64_t>(s.num_output_tokens + i),
                       forced_acceptance)) {
      break;
    }
    out.tokens.back().token = draft;  // a forced acceptance keeps the draft (exact: already equal)
    if (grows) {
      grown.push_back(out.tokens.back().token);
      outputs = grown;
    }
  }
  return out;
}

}  // namespace

core::StepOutput sample_plan_rows(const core::StepPlan& plan, std::span<float> logits, int64_t vocab) {
  TACHYON_CHECK(logits.size() >= plan.logits_rows.size() * static_cast<size_t>(vocab))
      << "internal: logits hold fewer rows than the plan";
  core::StepOutput output;
  size_t row = 0;
  for (const core::ScheduledSequence& s : plan.sequences) {
    if (!s.sample) continue;
    output.sequences.push_back(verify_sequence(s, logits, row, vocab, plan.forced_acceptance));
    row += 1 + static_cast<size_t>(s.num_draft_tokens());
  }
  TACHYON_CHECK(row == plan.logits_rows.size()) << "internal: " << row << " sampled rows, the plan has "
                                                 << plan.logits_rows.size();
  return output;
}

}  // namespace tachyon::runner
