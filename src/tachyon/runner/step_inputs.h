// StepInputs: the per-step metadata of a GPU forward laid out in one staging buffer (DESIGN.md
// rule 3: built on the host, one H2D copy per step, nothing read back). Every array sits at an
// offset fixed at start-up from the limits, so a CUDA graph captured once reads each step's
// values from the same device addresses. The layout puts the variable-length parts last, so a
// step copies only the prefix it uses. Host-only code: tested on the CPU
// (tests/unit/test_step_inputs.cpp); runner/cuda/ does the copy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tachyon/core/step_plan.h"

namespace tachyon::runner {

struct StepInputLimits {
  int32_t max_tokens = 0;          // tokens per step (max_num_batched_tokens, and >= max_seqs)
  int32_t max_seqs = 0;            // attention sequences per step (core::max_decode_rows when verifying drafts)
  int32_t max_blocks_per_seq = 0;  // ceil(max_model_len / block_size): the block-table stride
  size_t sampling_row_bytes = 0;   // size of one sampling row (kernels/cuda/sampling.h)
  // Logits (= sampled) rows per step: one per sampled sequence plus one per draft token it
  // carries, so a runner that verifies k drafts needs up to min(max_tokens, max_seqs * (1 + k)).
  // 0: max_seqs (no drafts).
  int32_t max_logits_rows = 0;
  // The runner's own fixed-offset inputs (MTP drafting's records and next tokens), copied with
  // every step's prefix so a graph reads them at one address; 0: none.
  size_t runner_bytes = 0;

  int32_t logits_rows_capacity() const { return max_logits_rows > 0 ? max_logits_rows : max_seqs; }
};

// Byte offsets of each array in the staging buffer; all int32 unless said otherwise.
struct StepInputLayout {
  size_t token_ids = 0;      // [max_tokens]
  size_t positions = 0;      // [max_tokens]
  size_t slot_mapping = 0;   // [max_tokens]; -1 for padding rows (no K/V write)
  size_t logits_rows = 0;    // [logits_rows_capacity()] rows of the batch whose logits are computed
  size_t context_lens = 0;   // [max_seqs] cached + new tokens of each sequence
  size_t query_starts = 0;   // [max_seqs + 1] prefix offsets of each sequence's rows
  size_t num_deferred = 0;   // [1] deferred tokens of the step (core/step_plan.h)
  size_t deferred = 0;       // [max_seqs, 2] each one's (token index, previous step's sampled row)
  size_t sampling_rows = 0;  // [logits_rows_capacity()] sampling rows, one per logits row (opaque here)
  size_t runner = 0;         // [runner_bytes] the runner's own inputs (opaque here), before the block tables
  size_t block_tables = 0;   // [max_seqs, max_blocks_per_seq]
  size_t variable = 0;       // start of the variable-length tail (sampling token histories)
  int32_t block_table_stride = 0;

  static StepInputLayout make(const StepInputLimits& limits);
};

struct StepInputSummary {
  int32_t num_tokens = 0;       // rows of the forward, padding included
  int32_t num_seqs = 0;         // attention sequences (a verify step's rows each count), padding included
  int32_t num_logits_rows = 0;  // rows of the LM head (padding included for graphs)
  int32_t num_sampled = 0;      // real sampled rows (the first num_sampled logits rows; 1 + k per sequence)
  int32_t max_query_len = 0;
  int32_t max_context_len = 0;
  int32_t num_decode_seqs = 0;  // leading sequences that run one token (the scheduler puts decodes first)
  int64_t prefill_context_tokens = 0;  // context tokens of the sequences after those (earlier chunks included)
  int32_t num_deferred = 0;     // tokens the runner takes from the previous step's sampled rows
  bool decode_only = false;     // every attention sequence runs one token and samples it (verify rows too)
  size_t bytes_used = 0;        // prefix of the staging buffer to copy (before the variable tail)
};

// True when the plan is a pure decode step: one token per sequence, each sampled.
bool is_decode_only(const core::StepPlan& plan);

// True when every sequence of the plan runs its last known token and its drafts, and is sampled:
// a decode step, or a verify step of speculative decoding (runner/model_runner.h).
bool runs_as_decode_rows(const core::StepPlan& plan);

// Writes the plan's arrays at the layout's offsets in `staging`. A plan that runs_as_decode_rows
// is laid out as one attention sequence per token: a sequence's row i (its last known token, then
// draft i - 1) is a decode at context num_computed + i + 1 over the sequence's blocks, so a verify
// step runs the decode kernels and graphs, and row i attends exactly as the plain decode at that
// position would (the rows before it in the step wrote their K/V first, as the earlier steps of
// a plain run would have). padded_seqs > the rows (steps replayed from a graph of that batch
// size) appends padding rows: token 0 at position 0, slot -1, context length 0, logits row = its
// own row. Checks every capacity and throws Error naming the limit when the plan exceeds one.
StepInputSummary fill_step_inputs(const core::StepPlan& plan, const StepInputLayout& layout,
                                  const StepInputLimits& limits, std::byte* staging, int32_t padded_seqs = 0);

}  // namespace tachyon::runner
