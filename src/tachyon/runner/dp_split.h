// Data-parallel attention on CPU thread ranks: which replica runs each sequence, and one step's
// StepPlan cut into one plan per replica (runner/dp_cpu_model_runner.h runs them). The cut itself,
// by whole sequences (cut_plan_by_sequence), also gives two-batch overlap its micro-batches
// (tbo_split.h).
//
// The engine CHOSE the replica when it gave the sequence its blocks: it plans D * B block ids,
// replica d's KV pool being ids [d * B, (d + 1) * B) (B = blocks per replica; the runner's
// kv_cache_replicas(), engine/kv_cache_manager.h), and every block table lies in one pool. So a
// sequence's replica is its first block's pool, and the replica's plan carries its blocks as the
// replica's own cache indexes them: id - d * B, slot - d * B * block_size. Nothing is remembered
// between steps; a prefix hit, an n > 1 sibling or a resumed sequence runs on the replica whose
// pool holds its cached blocks because that is where the engine found them.
// Tests: tests/unit/test_dp_families.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "tachyon/core/step_plan.h"

namespace tachyon::runner {

class DpPlacement {
 public:
  DpPlacement(int dp_size, int32_t blocks_per_replica);
  int size() const { return dp_size_; }
  int32_t blocks_per_replica() const { return blocks_per_replica_; }
  // The replica of a planned sequence: its blocks' pool (see above). Throws when a block is out
  // of range or the table spans two pools (the engine planned blocks for no single replica).
  int place(const core::ScheduledSequence& sequence);
  // [dp] how many sequences each replica started from no computed token so far (counted at
  // their first step).
  const std::vector<int64_t>& placed() const { return placed_; }

 private:
  int dp_size_;
  int32_t blocks_per_replica_;
  std::vector<int64_t> placed_;  // [dp]
};

// A step cut by whole sequences into parts.
struct PlanParts {
  // [parts] each part's plan: its sequences in the step's order, their tokens re-indexed from 0
  // (token_ids, positions, slot_mapping, first_token, logits_rows); block tables and slots as the
  // step's; block_size and forced_acceptance the step's.
  std::vector<core::StepPlan> plans;
  // [plan.logits_rows.size()] where each logits row of the step is: (part, row of its logits).
  std::vector<std::pair<int, int64_t>> rows;
  // [plan.num_tokens()] where each token of the step is: (part, token of its plan).
  std::vector<std::pair<int, int64_t>> tokens;
};

// Cuts `plan` into `parts` plans; sequence i goes to part part_of_sequence[i] (in [0, parts)).
PlanParts cut_plan_by_sequence(const core::StepPlan& plan, std::span<const int> part_of_sequence, int parts);

// [dp] the replicas' plans (cut_plan_by_sequence), their blocks and slots in each replica's own
// cache (block id - d * B), and where each logits row of the step is: (replica, row).
using DpStep = PlanParts;

// Cuts `plan` by placement. A sequence's draft rows go with it (the replica's forward computes
// their logits; the engine thread verifies them from the step's rows, as one runner does).
DpStep split_plan(const core::StepPlan& plan, DpPlacement& placement);

}  // namespace tachyon::runner
