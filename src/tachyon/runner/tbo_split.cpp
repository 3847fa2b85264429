// The two micro-batches of a TBO step (see tbo_split.h).
#include "tachyon/runner/tbo_split.h"

#include <cstdlib>

#include "tachyon/base/check.h"
#include "tachyon/runner/dp_split.h"

namespace tachyon::runner {

TboSplit split_micro_batches(const core::StepPlan& plan) {
  const size_t count = plan.sequences.size();
  TACHYON_CHECK(count >= 2) << "internal: two-batch overlap splits a step of " << count << " sequence(s)";
  TACHYON_CHECK(plan.deferred_tokens.empty()) << "internal: deferred tokens reach the TBO split unresolved";
  // The cut: micro-batch 0 takes sequences [0, cut); the one that balances the tokens best.
  size_t cut = 1;
  int64_t before = 0, best = -1;
  for (size_t k = 1; k < count; ++k) {
    before += plan.sequences[k - 1].num_tokens;
    const int64_t imbalance = std::llabs(plan.num_tokens() - 2 * before);
    if (best < 0 || imbalance < best) best = imbalance, cut = k;
  }
  std::vector<int> part_of_sequence(count);  // [sequences] 0 before the cut, 1 from it
  for (size_t i = cut; i < count; ++i) part_of_sequence[i] = 1;
  PlanParts parts = cut_plan_by_sequence(plan, part_of_sequence, 2);
  for (size_t i = 1; i < parts.rows.size(); ++i) {
    TACHYON_CHECK(parts.rows[i].first >= parts.rows[i - 1].first)
        << "internal: logits row " << plan.logits_rows[i] << " is out of sequence order";
  }
  for (size_t t = 1; t < parts.tokens.size(); ++t) {
    TACHYON_CHECK(parts.tokens[t].first >= parts.tokens[t - 1].first)
        << "internal: token " << t << " of the step is out of sequence order";
  }
  return {std::move(parts.plans[0]), std::move(parts.plans[1])};
}

}  // namespace tachyon::runner
