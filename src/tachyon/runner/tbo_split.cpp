// The two micro-batches of a TBO step (see tbo_split.h).
#include "tachyon/runner/tbo_split.h"

#include <cstdlib>

#include "tachyon/base/check.h"

namespace tachyon::runner {

TboSplit split_micro_batches(const core::StepPlan& plan) {
  const size_t count = plan.sequences.size();
  TACHYON_CHECK(count >= 2) << "internal: two-batch overlap splits a step of " << count << " sequence(s)";
  TACHYON_CHECK(!plan.has_drafts()) << "two-batch overlap does not verify draft tokens (no test covers it)";
  TACHYON_CHECK(plan.deferred_tokens.empty()) << "internal: deferred tokens reach the TBO split unresolved";
  // The cut: micro-batch 0 takes sequences [0, cut); the one that balances the tokens best.
  size_t cut = 1;
  int64_t before = 0, best = -1;
  for (size_t k = 1; k < count; ++k) {
    before += plan.sequences[k - 1].num_tokens;
    const int64_t imbalance = std::llabs(plan.num_tokens() - 2 * before);
    if (best < 0 || imbalance < best) best = imbalance, cut = k;
  }
  TboSplit split;
  std::vector<int> part_of_token(static_cast<size_t>(plan.num_tokens()), -1);  // [num_tokens]
  std::vector<int64_t> local_token(static_cast<size_t>(plan.num_tokens()), -1);
  for (size_t i = 0; i < count; ++i) {
    const int part = i < cut ? 0 : 1;
    core::StepPlan& p = split[static_cast<size_t>(part)];
    p.block_size = plan.block_size;
    const core::ScheduledSequence& s = plan.sequences[i];
    core::ScheduledSequence local = s;
    local.first_token = p.num_tokens();
    for (int64_t t = s.first_token; t < s.first_token + s.num_tokens; ++t) {
      part_of_token[static_cast<size_t>(t)] = part;
      local_token[static_cast<size_t>(t)] = p.num_tokens();
      p.token_ids.push_back(plan.token_ids[static_cast<size_t>(t)]);
      p.positions.push_back(plan.positions[static_cast<size_t>(t)]);
      p.slot_mapping.push_back(plan.slot_mapping[static_cast<size_t>(t)]);
    }
    p.sequences.push_back(std::move(local));
  }
  int last_part = 0;
  for (int64_t row : plan.logits_rows) {
    const int part = part_of_token[static_cast<size_t>(row)];
    TACHYON_CHECK(part >= last_part) << "internal: logits row " << row << " is out of sequence order";
    last_part = part;
    split[static_cast<size_t>(part)].logits_rows.push_back(local_token[static_cast<size_t>(row)]);
  }
  return split;
}

}  // namespace tachyon::runner
