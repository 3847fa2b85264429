#include "tachyon/runner/draft_acceptance.h"

#include "tachyon/kernels/sampling.h"

namespace tachyon::runner {

double forced_acceptance_uniform(uint64_t seed, uint64_t step) {
  // Another key than the sampler's (seed itself), so the accept draw and the token draw of a row
  // are independent.
  return kernels::cpu::uniform_for_step(seed ^ 0x5bd1e9955bd1e995ull, step);
}

bool accepts_draft(int32_t drawn, int32_t draft, uint64_t seed, uint64_t step, float forced_acceptance) {
  if (forced_acceptance < 0.0f) return drawn == draft;
  return forced_acceptance_uniform(seed, step) < static_cast<double>(forced_acceptance);
}

}  // namespace tachyon::runner
