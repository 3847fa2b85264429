// The forward half of a StepPlan as bytes, for the leader node of a multi-node TP group to send
// each step to the other nodes (TpCudaModelRunner broadcasts them over the TP group's NCCL
// communicator). Only what the forward reads travels: token ids, positions, slots, logits rows,
// and per sequence its place in the batch, cache state, block table and `sample` flag. Sampling
// inputs do not: a follower's sampled tokens are thrown away (rank 0 on the leader samples for
// the group), so a decoded plan samples greedily with no history.
// Layout: little-endian, fixed-width fields, each array preceded by its int64 length; a version
// word first so mismatched builds fail loudly. Tests: tests/unit/test_plan_wire.cpp.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "tachyon/core/step_plan.h"

namespace tachyon::runner {

std::vector<std::byte> encode_plan(const core::StepPlan& plan);

// Throws tachyon::Error on bytes that are not a whole plan of this format.
core::StepPlan decode_plan(std::span<const std::byte> bytes);

// An upper bound of encode_plan's size for any plan within these limits (sizes receive buffers).
size_t max_encoded_plan_bytes(int64_t max_tokens, int64_t max_seqs, int64_t max_blocks_per_seq);

}  // namespace tachyon::runner
