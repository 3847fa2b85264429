#include "tachyon/runner/dp_split.h"

#include <algorithm>

#include "tachyon/base/check.h"

namespace tachyon::runner {

DpPlacement::DpPlacement(int dp_size) : dp_size_(dp_size), placed_(static_cast<size_t>(std::max(dp_size, 1)), 0) {
  TACHYON_CHECK(dp_size >= 1) << "data parallel size " << dp_size;
}

int DpPlacement::place(const core::ScheduledSequence& s) {
  TACHYON_CHECK(!s.block_table.empty()) << "sequence " << s.sequence_id << " is planned without a KV block";
  const int32_t first = s.block_table.front();
  if (s.num_computed == 0) {  // fresh blocks: the next replica in turn
    const int replica = next_;
    next_ = (next_ + 1) % dp_size_;
    replica_of_[first] = replica;
    ++placed_[static_cast<size_t>(replica)];
    return replica;
  }
  const auto it = replica_of_.find(first);
  TACHYON_CHECK(it != replica_of_.end()) << "sequence " << s.sequence_id << " has " << s.num_computed
                                         << " computed tokens in blocks no data-parallel replica computed (KV "
                                            "imported from elsewhere is not supported with --dp)";
  return it->second;
}

DpStep split_plan(const core::StepPlan& plan, DpPlacement& placement) {
  DpStep step;
  step.plans.resize(static_cast<size_t>(placement.size()));
  for (core::StepPlan& p : step.plans) {
    p.block_size = plan.block_size;
    p.forced_acceptance = plan.forced_acceptance;
  }
  std::vector<int> replica_of_token(static_cast<size_t>(plan.num_tokens()), -1);  // [num_tokens]
  std::vector<int64_t> local_token(static_cast<size_t>(plan.num_tokens()), -1);    // [num_tokens]
  for (const core::ScheduledSequence& s : plan.sequences) {
    TACHYON_CHECK(s.draft_tokens.empty()) << "data-parallel attention does not verify draft tokens";
    const int replica = placement.place(s);
    core::StepPlan& p = step.plans[static_cast<size_t>(replica)];
    core::ScheduledSequence local = s;
    local.first_token = p.num_tokens();
    for (int64_t i = 0; i < s.num_tokens; ++i) {
      const size_t t = static_cast<size_t>(s.first_token + i);
      replica_of_token[t] = replica;
      local_token[t] = p.num_tokens();
      p.token_ids.push_back(plan.token_ids[t]);
      p.positions.push_back(plan.positions[t]);
      p.slot_mapping.push_back(plan.slot_mapping[t]);
    }
    p.sequences.push_back(std::move(local));
  }
  for (int64_t row : plan.logits_rows) {
    const int replica = replica_of_token[static_cast<size_t>(row)];
    TACHYON_CHECK(replica >= 0) << "logits row " << row << " belongs to no planned sequence";
    std::vector<int64_t>& rows = step.plans[static_cast<size_t>(replica)].logits_rows;
    rows.push_back(local_token[static_cast<size_t>(row)]);
    step.rows.push_back({replica, static_cast<int64_t>(rows.size()) - 1});
  }
  return step;
}

}  // namespace tachyon::runner
