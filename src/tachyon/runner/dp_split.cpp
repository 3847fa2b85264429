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

PlanParts cut_plan_by_sequence(const core::StepPlan& plan, std::span<const int> part_of_sequence, int parts) {
  TACHYON_CHECK(part_of_sequence.size() == plan.sequences.size())
      << "internal: " << part_of_sequence.size() << " parts given for " << plan.sequences.size() << " sequences";
  PlanParts out;
  out.plans.resize(static_cast<size_t>(parts));
  for (core::StepPlan& p : out.plans) {
    p.block_size = plan.block_size;
    p.forced_acceptance = plan.forced_acceptance;
  }
  out.tokens.assign(static_cast<size_t>(plan.num_tokens()), {-1, -1});
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const int part = part_of_sequence[i];
    TACHYON_CHECK(part >= 0 && part < parts) << "internal: sequence " << i << " given part " << part << " of " << parts;
    const core::ScheduledSequence& s = plan.sequences[i];
    core::StepPlan& p = out.plans[static_cast<size_t>(part)];
    core::ScheduledSequence local = s;
    local.first_token = p.num_tokens();
    for (int64_t t = s.first_token; t < s.first_token + s.num_tokens; ++t) {
      out.tokens[static_cast<size_t>(t)] = {part, p.num_tokens()};
      p.token_ids.push_back(plan.token_ids[static_cast<size_t>(t)]);
      p.positions.push_back(plan.positions[static_cast<size_t>(t)]);
      p.slot_mapping.push_back(plan.slot_mapping[static_cast<size_t>(t)]);
    }
    p.sequences.push_back(std::move(local));
  }
  for (int64_t row : plan.logits_rows) {
    const auto [part, local] = out.tokens[static_cast<size_t>(row)];
    TACHYON_CHECK(part >= 0) << "logits row " << row << " belongs to no planned sequence";
    std::vector<int64_t>& rows = out.plans[static_cast<size_t>(part)].logits_rows;
    rows.push_back(local);
    out.rows.push_back({part, static_cast<int64_t>(rows.size()) - 1});
  }
  return out;
}

DpStep split_plan(const core::StepPlan& plan, DpPlacement& placement) {
  std::vector<int> replica_of(plan.sequences.size());  // [sequences]
  for (size_t i = 0; i < plan.sequences.size(); ++i) replica_of[i] = placement.place(plan.sequences[i]);
  DpStep step = cut_plan_by_sequence(plan, replica_of, placement.size());
  for (int replica = 0; replica < placement.size(); ++replica) {  // into the replica's own cache
    core::StepPlan& p = step.plans[static_cast<size_t>(replica)];
    const int32_t first_block = replica * placement.blocks_per_replica();  // the replica's block 0
    for (core::ScheduledSequence& s : p.sequences) {
      for (int32_t& block : s.block_table) block -= first_block;
    }
    for (int64_t& slot : p.slot_mapping) slot -= static_cast<int64_t>(first_block) * plan.block_size;
  }
  return step;
}

}  // namespace tachyon::runner
