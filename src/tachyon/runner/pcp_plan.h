// PcpPlan: how one step's rows are split over the ranks of a prefill-context-parallel (PCP) group
// (--prefill-context-parallel-size N, docs/parallelism.md), built on the host from the StepPlan
// alone, identically on every rank, before the forward: nothing is read back from a device.
//
// Split: dual-chunk. The step's n rows (its sequences' rows, flattened in plan order) are cut
// into 2N contiguous pieces (sizes differ by at most one) and rank r computes pieces r and
// 2N-1-r. Causal attention costs more for later rows, so pairing an early piece with a late one
// gives every rank about the same work on a long prompt (round-robin by token would too, but its
// rows are not contiguous runs of positions); contiguous pieces keep unit strides, so a rank's
// rows are ordinary (sequence, num_computed, num_tokens) entries of a local StepPlan (a piece
// that crosses a sequence boundary is two entries) and the unsplit paged attention kernels run
// on them unchanged (same rows in the same order per query: attention is bit-exact).
// No padding: the grouped all_gatherv carries runs of any length, so ranks with fewer rows send
// fewer bytes; every rank has at least one row (n >= 2N) and joins every collective.
//
// A step with fewer rows than 2N, or whose sequences all have one row (decodes), is not split
// (split == false): every rank runs it whole on its own full cache, with no collective
// (replicated decode).
// Tests: tests/unit/test_pcp_families.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "tachyon/core/step_plan.h"

namespace tachyon::runner {

struct PcpPlan {
  int size = 1;
  bool split = false;
  // Per rank: the plan's token indices it computes, ascending ([size][rows of rank r]).
  std::vector<std::vector<int64_t>> rank_tokens;
  // rank_tokens concatenated in rank order: the plan token of each row of a gathered tensor.
  std::vector<int64_t> gathered_tokens;
  // Per plan token: its sequence's index in plan.sequences.
  std::vector<int64_t> token_sequence;
  // Per rank: the local StepPlan its forward and attention run (token_ids, positions,
  // slot_mapping, logits_rows and one ScheduledSequence per non-empty piece, first_token local).
  // A piece carries its sequence's sampling inputs, and `sample` only on the piece that ends at
  // the sequence's last row (the one holding its logits row), so a rank can sample its own
  // logits rows as the whole plan would (the GPU runner does; the CPU ranks gather the logits).
  std::vector<core::StepPlan> local;
  // Per rank: for each of its local logits rows, the index in plan.logits_rows it fills.
  std::vector<std::vector<int64_t>> logits_row_of;
};

// The split of `plan` over a group of `size` ranks (size >= 1).
PcpPlan build_pcp_plan(const core::StepPlan& plan, int size);

}  // namespace tachyon::runner
