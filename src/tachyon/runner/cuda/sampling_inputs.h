// SamplingInputs: the host half of GPU sampling. Turns the sampled sequences of a StepPlan into
// the plain rows the sampling kernel reads (kernels/cuda/sampling.h), and the kernel's results
// back into core::SampledToken. Host-only code; the runner copies both vectors into its staging
// buffer (one H2D per step, DESIGN.md rule 3).
//
// Where the draw's inputs come from: seed = ScheduledSequence::seed (the request's seed, or one the
// engine drew for it), step = ScheduledSequence::num_output_tokens; the kernel's uniform is
// sampling_uniform(seed, step), the same number as kernels::cpu::uniform_for_step, so a seeded request
// samples the same tokens on the GPU as on the CPU, whatever shares its batch.
//
// Token histories travel only when a penalty needs them (the prompt only for the repetition
// penalty), and masked ids only while min_tokens holds: a plain request adds nothing.
// Tests: tests/gpu/test_sampling.cpp (BuildSamplingInputs*).
#pragma once

#include <cstdint>
#include <vector>

#include "tachyon/core/sampled_token.h"
#include "tachyon/core/step_plan.h"
#include "tachyon/kernels/cuda/sampling.h"

namespace tachyon::runner {

struct SamplingInputs {
  // [num_sampled] one row per sequence with sample == true, in plan order (= logits row order).
  std::vector<kernels::cuda::SamplingRow> rows;
  // The int32 ids rows point into: per row, its prompt (repetition penalty only) then its outputs
  // (any penalty), then its masked ids (stop_token_ids, and EOS unless ignore_eos).
  std::vector<int32_t> tokens;
};

// Throws Error when a sampled sequence has no params or the token array would pass 2^31 ids.
SamplingInputs build_sampling_inputs(const core::StepPlan& plan);

// The kernel's result for one row as the engine's SampledToken (the CPU sampler's shape): logprob
// only when row.num_logprobs >= 0, the top list when > 0. Throws Error naming the failure when
// the kernel reported one (no finite logit, an id outside the vocabulary).
core::SampledToken to_sampled_token(const kernels::cuda::SampledRow& sampled, const kernels::cuda::SamplingRow& row);

}  // namespace tachyon::runner
