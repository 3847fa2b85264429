// StepInputs: the staging layout of the GPU runner, built on the host. Fixed offsets that do not
// overlap, every array filled from the plan, graph padding rows that write nothing, and clear
// errors when a plan exceeds a limit.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "tachyon/base/check.h"
#include "tachyon/runner/step_inputs.h"

namespace tachyon::runner {
namespace {

StepInputLimits limits() { return {.max_tokens = 64, .max_seqs = 8, .max_blocks_per_seq = 4, .sampling_row_bytes = 72}; }

const int32_t* at(const std::vector<std::byte>& staging, size_t offset) {
  return reinterpret_cast<const int32_t*>(staging.data() + offset);
}

// Two sequences: one decoding at position 20 (2 blocks of 16), one prefilling 3 tokens.
core::StepPlan two_sequence_plan() {
  core::StepPlan plan;
  plan.block_size = 16;
  plan.token_ids = {7, 1, 2, 3};
  plan.positions = {20, 0, 1, 2};
  plan.slot_mapping = {5 * 16 + 4, 9 * 16, 9 * 16 + 1, 9 * 16 + 2};
  plan.logits_rows = {0, 3};
  core::ScheduledSequence a{.sequence_id = 1, .first_token = 0, .num_tokens = 1, .num_computed = 20,
                              .block_table = {3, 5}, .sample = true};
  core::ScheduledSequence b{.sequence_id = 2, .first_token = 1, .num_tokens = 3, .num_computed = 0,
                              .block_table = {9}, .sample = true};
  plan.sequences = {a, b};
  return plan;
}

TEST(StepInputs, LayoutArraysAreAlignedAndDisjoint) {
  const StepInputLimits l = limits();
  const StepInputLayout layout = StepInputLayout::make(l);
  const std::vector<std::pair<size_t, size_t>> arrays = {
      {layout.token_ids, 64 * 4},     {layout.positions, 64 * 4},   {layout.slot_mapping, 64 * 4},
      {layout.logits_rows, 8 * 4},    {layout.context_lens, 8 * 4}, {layout.query_starts, 9 * 4},
      {layout.num_deferred, 4},       {layout.deferred, 8 * 2 * 4}, {layout.sampling_rows, 8 * 72},
      {layout.block_tables, 8 * 4 * 4}};
  for (size_t i = 0; i < arrays.size(); ++i) {
    EXPECT_EQ(arrays[i].first % 256, 0u) << "array " << i;
    const size_t end = arrays[i].first + arrays[i].second;
    const size_t next = i + 1 < arrays.size() ? arrays[i + 1].first : layout.variable;
    EXPECT_LE(end, next) << "array " << i << " overlaps the next";
  }
  EXPECT_EQ(layout.block_table_stride, 4);
}

// The runner's own region (MTP drafting's inputs) sits at a fixed offset inside the prefix every
// step copies, so a graph reads it at one address whatever the step's length.
TEST(StepInputs, TheRunnersRegionIsFixedAndCopiedWithEveryStep) {
  StepInputLimits l = limits();
  l.runner_bytes = 1000;
  const StepInputLayout layout = StepInputLayout::make(l);
  EXPECT_EQ(layout.runner % 256, 0u);
  EXPECT_GE(layout.runner, layout.sampling_rows + 8 * 72);
  EXPECT_LE(layout.runner + 1000, layout.block_tables);
  std::vector<std::byte> staging(layout.variable + 4096);
  const StepInputSummary s = fill_step_inputs(two_sequence_plan(), layout, l, staging.data());
  EXPECT_GE(s.bytes_used, layout.runner + 1000);
  EXPECT_EQ(StepInputLayout::make(limits()).runner, StepInputLayout::make(limits()).block_tables);  // none: empty
}

TEST(StepInputs, FillsEveryArrayFromThePlan) {
  const StepInputLimits l = limits();
  const StepInputLayout layout = StepInputLayout::make(l);
  std::vector<std::byte> staging(layout.variable, std::byte{0xAB});
  const StepInputSummary s = fill_step_inputs(two_sequence_plan(), layout, l, staging.data());
  EXPECT_EQ(s.num_tokens, 4);
  EXPECT_EQ(s.num_seqs, 2);
  EXPECT_EQ(s.num_sampled, 2);
  EXPECT_EQ(s.num_logits_rows, 2);
  EXPECT_EQ(s.max_query_len, 3);
  EXPECT_EQ(s.max_context_len, 21);
  EXPECT_FALSE(s.decode_only);
  EXPECT_EQ(s.num_decode_seqs, 1) << "the leading one-token sequence goes to the decode kernel";
  EXPECT_EQ(s.prefill_context_tokens, 3) << "the prefill sequence's context; the decode's 21 do not count";
  EXPECT_EQ(std::vector<int32_t>(at(staging, layout.token_ids), at(staging, layout.token_ids) + 4),
            (std::vector<int32_t>{7, 1, 2, 3}));
  EXPECT_EQ(std::vector<int32_t>(at(staging, layout.positions), at(staging, layout.positions) + 4),
            (std::vector<int32_t>{20, 0, 1, 2}));
  EXPECT_EQ(at(staging, layout.slot_mapping)[0], 84);
  EXPECT_EQ(at(staging, layout.logits_rows)[1], 3);
  EXPECT_EQ(at(staging, layout.context_lens)[0], 21);
  EXPECT_EQ(at(staging, layout.context_lens)[1], 3);
  EXPECT_EQ(std::vector<int32_t>(at(staging, layout.query_starts), at(staging, layout.query_starts) + 3),
            (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(at(staging, layout.block_tables)[0], 3);
  EXPECT_EQ(at(staging, layout.block_tables)[1], 5);
  EXPECT_EQ(at(staging, layout.block_tables)[4], 9);  // row 1 starts at the stride
  EXPECT_EQ(s.bytes_used, layout.block_tables + 2 * 4 * sizeof(int32_t));
  EXPECT_EQ(s.num_deferred, 0);
  EXPECT_EQ(at(staging, layout.num_deferred)[0], 0) << "a step without deferred tokens resolves none";
}

// Asynchronous scheduling: the placeholders' (token index, sampled row) pairs and their count.
TEST(StepInputs, DeferredTokensAreListedWithTheirCount) {
  const StepInputLimits l = limits();
  const StepInputLayout layout = StepInputLayout::make(l);
  core::StepPlan plan = two_sequence_plan();
  plan.token_ids[0] = 0;
  plan.deferred_tokens = {{.token_index = 0, .sampled_index = 1}};
  std::vector<std::byte> staging(layout.variable, std::byte{0xAB});
  const StepInputSummary s = fill_step_inputs(plan, layout, l, staging.data());
  EXPECT_EQ(s.num_deferred, 1);
  EXPECT_EQ(at(staging, layout.num_deferred)[0], 1);
  EXPECT_EQ(at(staging, layout.deferred)[0], 0);
  EXPECT_EQ(at(staging, layout.deferred)[1], 1);
  EXPECT_GE(s.bytes_used, layout.deferred + 2 * sizeof(int32_t)) << "the list is part of the upload";
  plan.deferred_tokens = {{.token_index = 4, .sampled_index = 0}};  // past the step's tokens
  EXPECT_THROW(fill_step_inputs(plan, layout, l, staging.data()), Error);
}

TEST(StepInputs, DecodeStepsPadToTheGraphBatchWithRowsThatWriteNothing) {
  const StepInputLimits l = limits();
  const StepInputLayout layout = StepInputLayout::make(l);
  core::StepPlan plan = two_sequence_plan();
  plan.token_ids = {7, 8};
  plan.positions = {20, 3};
  plan.slot_mapping = {84, 147};
  plan.logits_rows = {0, 1};
  plan.sequences[1].first_token = 1;
  plan.sequences[1].num_tokens = 1;
  plan.sequences[1].num_computed = 3;
  ASSERT_TRUE(is_decode_only(plan));
  std::vector<std::byte> staging(layout.variable);
  const StepInputSummary s = fill_step_inputs(plan, layout, l, staging.data(), /*padded_seqs=*/4);
  EXPECT_TRUE(s.decode_only);
  EXPECT_EQ(s.num_decode_seqs, 4);
  EXPECT_EQ(s.prefill_context_tokens, 0);
  EXPECT_EQ(s.num_tokens, 4);
  EXPECT_EQ(s.num_seqs, 4);
  EXPECT_EQ(s.num_sampled, 2);
  EXPECT_EQ(s.num_logits_rows, 4);
  for (int r = 2; r < 4; ++r) {
    EXPECT_EQ(at(staging, layout.slot_mapping)[r], -1) << "padding row " << r << " must not write K/V";
    EXPECT_EQ(at(staging, layout.context_lens)[r], 0);
    EXPECT_EQ(at(staging, layout.logits_rows)[r], r);
  }
  EXPECT_EQ(at(staging, layout.query_starts)[4], 4);
}

// A verify step (each sequence runs its last known token and its drafts) is laid out as decode
// rows: row i of a sequence is its own attention sequence at context num_computed + i + 1 over
// the blocks that context spans, so the decode kernels and graphs serve it.
TEST(StepInputs, VerifyStepsAreLaidOutAsOneDecodeRowPerToken) {
  const StepInputLimits l = limits();
  const StepInputLayout layout = StepInputLayout::make(l);
  core::StepPlan plan;
  plan.block_size = 16;
  // Sequence 1: 14 cached, token 7 + drafts 8, 9 (positions 14..16: the third row crosses into
  // block 5). Sequence 2: 3 cached, token 4, no drafts (a plain decode inside the verify step).
  plan.token_ids = {7, 8, 9, 4};
  plan.positions = {14, 15, 16, 3};
  plan.slot_mapping = {3 * 16 + 14, 3 * 16 + 15, 5 * 16, 9 * 16 + 3};
  plan.logits_rows = {0, 1, 2, 3};
  core::ScheduledSequence a{.sequence_id = 1, .first_token = 0, .num_tokens = 3, .num_computed = 14,
                            .block_table = {3, 5}, .sample = true, .draft_tokens = {8, 9}};
  core::ScheduledSequence b{.sequence_id = 2, .first_token = 3, .num_tokens = 1, .num_computed = 3,
                            .block_table = {9}, .sample = true};
  plan.sequences = {a, b};
  ASSERT_TRUE(runs_as_decode_rows(plan));
  ASSERT_FALSE(is_decode_only(plan));
  std::vector<std::byte> staging(layout.variable, std::byte{0xAB});
  const StepInputSummary s = fill_step_inputs(plan, layout, l, staging.data(), /*padded_seqs=*/6);
  EXPECT_TRUE(s.decode_only);
  EXPECT_EQ(s.num_seqs, 6);
  EXPECT_EQ(s.num_decode_seqs, 6);
  EXPECT_EQ(s.num_tokens, 6);
  EXPECT_EQ(s.num_sampled, 4);
  EXPECT_EQ(s.num_logits_rows, 6);
  EXPECT_EQ(s.max_query_len, 1);
  EXPECT_EQ(s.max_context_len, 17);
  const int32_t* ctx = at(staging, layout.context_lens);
  EXPECT_EQ(std::vector<int32_t>(ctx, ctx + 6), (std::vector<int32_t>{15, 16, 17, 4, 0, 0}));
  const int32_t* starts = at(staging, layout.query_starts);
  EXPECT_EQ(std::vector<int32_t>(starts, starts + 7), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
  const int32_t* tables = at(staging, layout.block_tables);
  const int32_t stride = layout.block_table_stride;
  EXPECT_EQ(tables[0 * stride], 3);
  EXPECT_EQ(tables[1 * stride], 3);
  EXPECT_EQ(tables[2 * stride], 3);
  EXPECT_EQ(tables[2 * stride + 1], 5) << "the row at position 16 spans the second block";
  EXPECT_EQ(tables[3 * stride], 9);
  EXPECT_EQ(at(staging, layout.slot_mapping)[4], -1);
  EXPECT_EQ(at(staging, layout.slot_mapping)[5], -1);
  // The rows count against the attention-sequence capacity (max_decode_rows on the runner).
  StepInputLimits tight = l;
  tight.max_seqs = 3;
  tight.max_logits_rows = 8;
  const StepInputLayout tight_layout = StepInputLayout::make(tight);
  std::vector<std::byte> tight_staging(tight_layout.variable);
  EXPECT_THROW(fill_step_inputs(plan, tight_layout, tight, tight_staging.data()), Error);
  // A sequence that runs more than its last known token besides drafts is no verify row set.
  plan.sequences[1].num_tokens = 2;
  EXPECT_FALSE(runs_as_decode_rows(plan));
}

TEST(StepInputs, PlansBeyondTheLimitsFailWithTheLimitNamed) {
  const StepInputLimits l = limits();
  const StepInputLayout layout = StepInputLayout::make(l);
  std::vector<std::byte> staging(layout.variable);
  core::StepPlan plan = two_sequence_plan();
  plan.sequences[0].block_table = {1, 2, 3, 4, 5};
  try {
    fill_step_inputs(plan, layout, l, staging.data());
    FAIL() << "a block table longer than the stride must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_model_len"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fill_step_inputs(two_sequence_plan(), layout, l, staging.data(), /*padded_seqs=*/9), Error);
  EXPECT_FALSE(is_decode_only(two_sequence_plan()));
  EXPECT_FALSE(is_decode_only(core::StepPlan{}));
}

}  // namespace
}  // namespace tachyon::runner
