// SamplingInputs: the host half of GPU sampling. Turns the logits rows of a StepPlan into the
// plain rows the sampling kernel reads (kernels/cuda/sampling.h), and the kernel's results back
// into core::SampledToken. Host-only code; the runner copies both vectors into its staging
// buffer (one H2D per step, DESIGN.md rule 3).
//
// One kernel row per logits row: a sampled sequence with k draft tokens has 1 + k, and row i is
// drawn as a plain decode step would draw it after drafts 0..i-1 had been accepted (the CPU
// reference, runner/plan_sampling.h): its output count is num_output_tokens + i (the draw's step
// and the min_tokens test), and its penalty history is the outputs followed by drafts 0..i-1.
// The kernel's rows are independent, so every row is drawn even if an earlier draft is rejected;
// the runner keeps the rows up to the first rejection (runner/draft_acceptance.h).
//
// Where the draw's inputs come from: seed = ScheduledSequence::seed (the request's seed, or one the
// engine drew for it), step = ScheduledSequence::num_output_tokens (+ i for row i); the kernel's
// uniform is sampling_uniform(seed, step), the same number as kernels::cpu::uniform_for_step, so a
// seeded request samples the same tokens on the GPU as on the CPU, whatever shares its batch.
//
// Token histories travel only when a penalty needs them (the prompt only for the repetition
// penalty), and masked ids only while min_tokens holds: a plain request adds nothing. A
// structured-output mask travels bit-packed (vocab / 8 bytes per constrained sequence). A
// sequence's rows share one history (prompt, outputs, drafts; row i reads a prefix) and one list
// of masked ids, so drafts add k ids to the tail, not k copies.
// Tests: tests/gpu/test_sampling.cpp (BuildSamplingInputs*), tests/gpu/test_cuda_speculative.cpp
// (rows of sequences with drafts).
#pragma once

#include <cstdint>
#include <vector>

#include "tachyon/core/sampled_token.h"
#include "tachyon/core/step_plan.h"
#include "tachyon/kernels/cuda/sampling.h"

namespace tachyon::runner {

struct SamplingInputs {
  // [num_logits_rows] per sequence with sample == true, in plan order (= logits row order), 1 + k
  // rows: row i samples after its drafts 0..i-1.
  std::vector<kernels::cuda::SamplingRow> rows;
  // The int32 ids rows point into: per sampled sequence, its prompt (repetition penalty only)
  // then its outputs and drafts (any penalty), then its masked ids (stop_token_ids, and EOS
  // unless ignore_eos).
  std::vector<int32_t> tokens;
  // Structured outputs: [rows with a mask, allowed_words] the plan's bit-packed masks, in row
  // order (SamplingRow::allowed_row indexes them); empty when no sequence is constrained.
  std::vector<uint32_t> allowed;
  int32_t allowed_words = 0;  // ceil(vocab / 32) of the masks' vocabulary
  // Sequences whose mask follows the launch (ScheduledSequence::mask_follows): their rows'
  // allowed_row are 0..late_masks-1 in row order, and `allowed` stays empty until the runner
  // receives the masks. A plan has masks of one kind only.
  int32_t late_masks = 0;
};

// Throws Error when a sampled sequence has no params, a sequence that samples nothing carries
// drafts, the token array would pass 2^31 ids, or a plan mixes masks given and masks that follow.
SamplingInputs build_sampling_inputs(const core::StepPlan& plan);

// The kernel's result for one row as the engine's SampledToken (the CPU sampler's shape): logprob
// only when row.num_logprobs >= 0, the top list when > 0. Throws Error naming the failure when
// the kernel reported one (no finite logit, an id outside the vocabulary).
core::SampledToken to_sampled_token(const kernels::cuda::SampledRow& sampled, const kernels::cuda::SamplingRow& row);

}  // namespace tachyon::runner
