// The plan bytes a multi-node TP leader sends its followers: what the forward reads survives the
// round trip exactly, sampling inputs become greedy, and bad bytes are refused, not misread.
#include "tachyon/runner/plan_wire.h"

#include <memory>
#include <gtest/gtest.h>

#include "tachyon/base/check.h"

namespace tachyon::runner {
namespace {

core::StepPlan sample_plan(core::SamplingParams& params) {
  core::StepPlan plan;
  plan.block_size = 16;
  plan.token_ids = {5, 6, 7, 8, 9};
  plan.positions = {0, 1, 2, 40, 17};
  plan.slot_mapping = {160, 161, 162, 1000, -1};
  plan.logits_rows = {2, 3};
  core::ScheduledSequence a;
  a.sequence_id = 11;
  a.first_token = 0;
  a.num_tokens = 3;
  a.num_computed = 0;
  a.block_table = {10};
  a.sample = true;
  a.params = std::make_shared<const core::SamplingParams>(params);
  a.seed = 99;
  core::ScheduledSequence b;
  b.sequence_id = 12;
  b.first_token = 3;
  b.num_tokens = 1;
  b.num_computed = 40;
  b.block_table = {3, 4, 62};
  b.sample = false;
  plan.sequences = {a, b};
  return plan;
}

TEST(PlanWire, TheForwardFieldsRoundTripExactly) {
  core::SamplingParams params;
  params.temperature = 0.7f;
  params.repetition_penalty = 1.3f;
  const core::StepPlan plan = sample_plan(params);
  const std::vector<std::byte> bytes = encode_plan(plan);
  EXPECT_LE(bytes.size(), max_encoded_plan_bytes(5, 2, 3));
  const core::StepPlan back = decode_plan(bytes);
  EXPECT_EQ(back.block_size, 16);
  EXPECT_EQ(back.token_ids, plan.token_ids);
  EXPECT_EQ(back.positions, plan.positions);
  EXPECT_EQ(back.slot_mapping, plan.slot_mapping);
  EXPECT_EQ(back.logits_rows, plan.logits_rows);
  ASSERT_EQ(back.sequences.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto &want = plan.sequences[i], &got = back.sequences[i];
    EXPECT_EQ(got.sequence_id, want.sequence_id);
    EXPECT_EQ(got.first_token, want.first_token);
    EXPECT_EQ(got.num_tokens, want.num_tokens);
    EXPECT_EQ(got.num_computed, want.num_computed);
    EXPECT_EQ(got.block_table, want.block_table);
    EXPECT_EQ(got.sample, want.sample);
  }
  // A follower samples greedily from its own copy of the parameters; its tokens are discarded.
  ASSERT_NE(back.sequences[0].params, nullptr);
  EXPECT_TRUE(back.sequences[0].params->greedy());
  EXPECT_EQ(back.sequences[1].params, nullptr);
}

TEST(PlanWire, AnEmptyPlanRoundTrips) {
  const core::StepPlan back = decode_plan(encode_plan(core::StepPlan{}));
  EXPECT_TRUE(back.empty());
  EXPECT_TRUE(back.token_ids.empty());
}

TEST(PlanWire, BadBytesAreRefused) {
  core::SamplingParams params;
  std::vector<std::byte> bytes = encode_plan(sample_plan(params));
  for (size_t cut : {size_t{0}, size_t{7}, bytes.size() / 2, bytes.size() - 1}) {
    EXPECT_THROW(decode_plan(std::span(bytes).first(cut)), Error) << "cut at " << cut;
  }
  std::vector<std::byte> longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_THROW(decode_plan(longer), Error);
  std::vector<std::byte> other_version = bytes;
  other_version[0] = std::byte{7};
  try {
    decode_plan(other_version);
    ADD_FAILURE() << "a plan of another format version was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("same tachyon build"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tachyon::runner
