// How two-batch overlap (TBO) cuts a step into its two micro-batches: by whole SEQUENCES,
// contiguous in plan order, at the point that balances their token counts best (each gets at
// least one sequence). Whole sequences because a sequence's chunk attends to its own earlier
// tokens and its KV rows are written in this step: split inside a sequence, the second half would
// need the first half's keys before they exist. Contiguous because a plan's logits rows are in
// sequence order, so the step's rows are micro-batch 0's then micro-batch 1's, with no reordering.
// A sequence's draft rows go with it, so they too stay in order (speculative decoding verifies the
// step's rows as one batch's); so do its tokens, whose last hidden states an MTP drafter reads.
// A step of one sequence is not split (the runner runs it as one batch). The cut by sequence is
// runner/dp_split.h's cut_plan_by_sequence, which data-parallel attention cuts its replicas with.
// Tests: tests/unit/test_tbo_order.cpp.
#pragma once

#include <array>

#include "tachyon/core/step_plan.h"

namespace tachyon::runner {

// [2] the micro-batches' plans: their sequences in the step's order, tokens re-indexed from 0
// (token_ids, positions, slot_mapping, first_token, logits_rows); block tables unchanged.
using TboSplit = std::array<core::StepPlan, 2>;

// plan: at least two sequences, no deferred tokens left.
TboSplit split_micro_batches(const core::StepPlan& plan);

}  // namespace tachyon::runner
