// Whether a verify row accepts its draft token: the one rule the CPU sampler (plan_sampling.h)
// and the CUDA runner apply, row by row, to a sequence's 1 + k rows.
//
// Exact (the default): row i's token is drawn as a plain decode step would draw it after drafts
// 0..i-1 (same seed, output count and history), and draft i is accepted iff it equals that token,
// so the output is token-for-token the output without drafts.
//
// Forced (benchmarks only, StepPlan::forced_acceptance = p in [0, 1]): draft i is accepted iff a
// keyed uniform number of (seed, output count of the row) is below p, whatever the drawn token:
// a pure function of the request, so every rank and every replay agrees, and the mean acceptance
// length of k drafts is 1 + p + ... + p^k. The output is then not the model's.
// Tests: tests/unit/test_draft_verification.cpp.
#pragma once

#include <cstdint>

namespace tachyon::runner {

// The keyed number in [0, 1) that forced acceptance compares with p; independent of the
// sampling draw at the same step (a different key).
double forced_acceptance_uniform(uint64_t seed, uint64_t step);

// `drawn`: the row's token; `draft`: the draft it verifies; `step`: the row's output count
// (the sequence's num_output_tokens + the row's index); forced_acceptance < 0: exact.
bool accepts_draft(int32_t drawn, int32_t draft, uint64_t seed, uint64_t step, float forced_acceptance);

}  // namespace tachyon::runner
