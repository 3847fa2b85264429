// Data-parallel attention on CPU thread ranks: which replica runs each sequence, and one step's
// StepPlan cut into one plan per replica (runner/dp_cpu_model_runner.h runs them).
//
// Placement is ROUND-ROBIN over new sequences, in the order the scheduler first plans them, and
// sticky: a sequence stays on its replica, whose KV cache holds its rows. The key is the
// sequence's FIRST KV BLOCK, not its id, because that is what the engine's prefix cache shares:
// a sequence that starts with cached blocks (a prefix hit, an n > 1 sibling, a preempted
// sequence resumed over its own cached prefix) has num_computed > 0 at its first step, and its
// first block is the one the sequence that computed those rows started with, so it goes to the
// replica that holds them. A sequence planned with num_computed == 0 starts on fresh blocks and
// takes the next replica in turn. Bounded state: one entry per block id ever used first.
// Tests: tests/unit/test_dp_split.cpp.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tachyon/core/step_plan.h"

namespace tachyon::runner {

class DpPlacement {
 public:
  explicit DpPlacement(int dp_size);
  int size() const { return dp_size_; }
  // The replica of a planned sequence (see above); throws when a sequence with computed tokens
  // starts with a block no replica was given (its KV would be on none of them).
  int place(const core::ScheduledSequence& sequence);
  // [dp] how many sequences each replica was given fresh blocks for so far.
  const std::vector<int64_t>& placed() const { return placed_; }

 private:
  int dp_size_;
  std::vector<int64_t> placed_;  // [dp]
  int next_ = 0;                                 // the replica the next new sequence takes
  std::unordered_map<int32_t, int> replica_of_;  // first block id -> replica
};

struct DpStep {
  // [dp] each replica's plan: its sequences in the step's order, their tokens re-indexed from 0
  // (token_ids, positions, slot_mapping, first_token, logits_rows); block tables unchanged.
  std::vector<core::StepPlan> plans;
  // [plan.logits_rows.size()] where each logits row of the step is: (replica, row of its logits).
  std::vector<std::pair<int, int64_t>> rows;
};

// Cuts `plan` by placement. Plans with draft tokens are refused (the DP runner verifies none).
DpStep split_plan(const core::StepPlan& plan, DpPlacement& placement);

}  // namespace tachyon::runner
