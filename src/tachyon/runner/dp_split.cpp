#include "tachyon/runner/dp_split.h"

#include <algorithm>

#include "tachyon/base/check.h"

namespace tachyon::runner {

DpPlacement::DpPlacement(int dp_size, int32_t blocks_per_replica)
    : dp_size_(dp_size), blocks_per_replica_(blocks_per_replica), placed_(static_cast<size_t>(std::max(dp_size, 1)), 0) {
  TACHYON_CHECK(dp_size >= 1 && blocks_per_replica >= 1)
      << "data parallel size " << dp_size << ", KV blocks per replica " << blocks_per_replica;
}

int DpPlacement::place(const core::ScheduledSequence& s) {
  TACHYON_CHECK(!s.block_table.empty()) << "sequence " << s.sequence_id << " is planned without a KV block";
  const int replica = s.block_table.front() / blocks_per_replica_;
  for (int32_t block : s.block_table) {
    TACHYON_CHECK(block >= 0 && block / blocks_per_replica_ == replica && replica < dp_size_)
        << "internal: sequence " << s.sequence_id << " has KV block " << block << " outside replica " << replica
        << "'s blocks [" << replica * blocks_per_replica_ << ", " << (replica + 1) * blocks_per_replica_ << ") of "
        << dp_size_ << " replicas (the engine plans one KV pool per replica)";
  }
  if (s.num_computed == 0) ++placed_[static_cast<size_t>(replica)];
  return replica;
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
    const int32_t first_block = replica * placement.blocks_per_replica();  // the replica's block 0
    core::ScheduledSequence local = s;
    local.first_token = p.num_tokens();
    for (int32_t& block : local.block_table) block -= first_block;
    for (int64_t i = 0; i < s.num_tokens; ++i) {
      const size_t t = static_cast<size_t>(s.first_token + i);
      replica_of_token[t] = replica;
      local_token[t] = p.num_tokens();
      p.token_ids.push_back(plan.token_ids[t]);
      p.positions.push_back(plan.positions[t]);
      p.slot_mapping.push_back(plan.slot_mapping[t] - static_cast<int64_t>(first_block) * plan.block_size);
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
