// Sampling a plan's logits rows on the host with the CPU reference sampler (kernels/sampling.h),
// verifying draft tokens on the way. Shared by the CPU runner and the CPU tensor-parallel runner.
//
// Verification is exact for a deterministic draw (greedy, or seeded: the draw is a pure function
// of the seed, the output count, the logits and the history): row i of a sequence with k drafts is
// sampled as a plain decode step would sample it after the first i drafts, with the output count
// and the penalties' history advanced by them; draft i is accepted iff that token equals it, and
// the first token that differs (or the token after all k) ends the list. So a run with drafts
// gives token-for-token what the run without them gives, whatever the drafts were.
// Tests: tests/unit/test_draft_verification.cpp.
#pragma once

#include <cstdint>
#include <span>

#include "tachyon/core/step_output.h"
#include "tachyon/core/step_plan.h"

namespace tachyon::runner {

// logits: [plan.logits_rows.size(), vocab] f32 in plan order, used as scratch.
core::StepOutput sample_plan_rows(const core::StepPlan& plan, std::span<float> logits, int64_t vocab);

}  // namespace tachyon::runner
