// The drafter that proposes the runner's own drafts (engine/runner_drafter.h): a sequence's
// next_drafts are proposed for the token count they continue, once, and never after a release
// or a step that made none.
#include "tachyon/engine/runner_drafter.h"

#include <gtest/gtest.h>

namespace tachyon::engine {
namespace {

using Tokens = std::vector<int32_t>;

// A plan of one sampled sequence with `cached` tokens in the cache, its last known token and
// `drafts`, and the output the runner gave it: `applied` tokens, and drafts for the next step.
core::StepPlan plan_of(int64_t id, int64_t cached, const Tokens& drafts) {
  core::StepPlan plan;
  core::ScheduledSequence entry;
  entry.sequence_id = id;
  entry.num_computed = cached;
  entry.num_tokens = 1 + static_cast<int64_t>(drafts.size());
  entry.draft_tokens = drafts;
  entry.sample = true;
  plan.sequences.push_back(entry);
  return plan;
}

core::StepOutput output_of(int64_t id, int64_t applied, const Tokens& next_drafts) {
  core::StepOutput output;
  core::SequenceOutput out;
  out.sequence_id = id;
  out.tokens.resize(static_cast<size_t>(applied));
  out.next_drafts = next_drafts;
  output.sequences.push_back(out);
  return output;
}

TEST(RunnerDrafter, ProposesTheRunnersDraftsForTheTokensTheyContinue) {
  RunnerDrafter drafter;
  // 10 tokens cached, the 11th runs with 3 drafts; 2 accepted: 3 tokens applied -> 14 known.
  drafter.observe(plan_of(5, 10, {1, 2, 3}), output_of(5, 3, {40, 41, 42}));
  EXPECT_EQ(drafter.num_sequences(), 1u);
  const Tokens fourteen(14, 0);
  EXPECT_EQ(drafter.propose(5, fourteen), (Tokens{40, 41, 42}));
  EXPECT_TRUE(drafter.propose(5, fourteen).empty());  // once
  EXPECT_TRUE(drafter.propose(6, fourteen).empty());  // another sequence made none
}

TEST(RunnerDrafter, DraftsForAnotherTokenCountAreNotProposed) {
  RunnerDrafter drafter;
  drafter.observe(plan_of(5, 10, {}), output_of(5, 1, {40, 41}));  // 12 known after it
  EXPECT_TRUE(drafter.propose(5, Tokens(13, 0)).empty());
  EXPECT_EQ(drafter.num_sequences(), 0u);  // dropped, not kept for later
}

TEST(RunnerDrafter, AStepWithoutDraftsOrAReleaseForgetsThem) {
  RunnerDrafter drafter;
  drafter.observe(plan_of(5, 10, {}), output_of(5, 1, {40}));
  drafter.observe(plan_of(5, 11, {}), output_of(5, 1, {}));
  EXPECT_TRUE(drafter.propose(5, Tokens(13, 0)).empty());
  drafter.observe(plan_of(7, 10, {}), output_of(7, 1, {40}));
  drafter.release(7);
  EXPECT_TRUE(drafter.propose(7, Tokens(12, 0)).empty());
}

}  // namespace
}  // namespace tachyon::engine
