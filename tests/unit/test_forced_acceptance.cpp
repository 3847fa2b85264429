// Forced acceptance (benchmarks): each draft is accepted with probability p by a keyed draw of
// (seed, output count), whatever the drawn token, and the token after the last accepted draft is
// the target's own draw. p = 1 accepts all k, p = 0 none, p = 0.5 gives a mean acceptance length
// of 1 + 1/2 + ... + 1/2^k over many seeds, and the same seed always gives the same decision.
// Exact verification (p < 0) accepts a draft iff it is the drawn token.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tachyon/kernels/sampling.h"
#include "tachyon/runner/draft_acceptance.h"
#include "tachyon/runner/plan_sampling.h"

namespace tachyon::runner {
namespace {

constexpr int64_t kForcedVocab = 8;

// One sequence with `drafts`, greedy, every row's largest logit at token 5; the emitted tokens.
std::vector<int32_t> forced_verify(const std::vector<int32_t>& drafts, float forced, uint64_t seed) {
  core::StepPlan plan;
  plan.block_size = 16;
  plan.forced_acceptance = forced;
  core::ScheduledSequence s;
  s.sequence_id = 1;
  s.num_tokens = 1 + static_cast<int64_t>(drafts.size());
  s.num_computed = 4;
  s.block_table = {0};
  s.sample = true;
  s.draft_tokens = drafts;
  auto params = std::make_shared<core::SamplingParams>();
  params->temperature = 0.0f;
  s.params = params;
  s.seed = seed;
  s.num_output_tokens = 2;
  plan.token_ids.push_back(1);
  for (int32_t d : drafts) plan.token_ids.push_back(d);
  for (int64_t i = 0; i < s.num_tokens; ++i) {
    plan.positions.push_back(4 + i);
    plan.slot_mapping.push_back(4 + i);
    plan.logits_rows.push_back(i);
  }
  plan.sequences = {s};
  std::vector<float> logits(static_cast<size_t>(s.num_tokens * kForcedVocab), 0.0f);
  for (int64_t r = 0; r < s.num_tokens; ++r) logits[static_cast<size_t>(r * kForcedVocab + 5)] = 3.0f;
  std::vector<int32_t> tokens;
  const core::StepOutput out = sample_plan_rows(plan, logits, kForcedVocab);
  for (const core::SampledToken& t : out.sequences.at(0).tokens) tokens.push_back(t.token);
  return tokens;
}

TEST(ForcedAcceptance, OneAcceptsEveryDraftZeroNone) {
  const std::vector<int32_t> drafts = {1, 2, 3, 4};
  EXPECT_EQ(forced_verify(drafts, 1.0f, 7), (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(forced_verify(drafts, 0.0f, 7), (std::vector<int32_t>{5}));
  // Exact verification: the greedy draw is 5 on every row.
  EXPECT_EQ(forced_verify(drafts, -1.0f, 7), (std::vector<int32_t>{5}));
  EXPECT_EQ(forced_verify({5, 5, 2}, -1.0f, 7), (std::vector<int32_t>{5, 5, 5}));
}

TEST(ForcedAcceptance, HalfGivesTheGeometricMeanLengthAndIsKeyed) {
  const std::vector<int32_t> drafts = {1, 2, 3, 4};
  double total = 0;
  constexpr int kSeeds = 20000;
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    const std::vector<int32_t> tokens = forced_verify(drafts, 0.5f, seed);
    EXPECT_EQ(tokens, forced_verify(drafts, 0.5f, seed)) << "seed " << seed;
    // Accepted drafts are the drafts themselves, in order; then the target's draw.
    for (size_t i = 0; i + 1 < tokens.size(); ++i) ASSERT_EQ(tokens[i], drafts[i]);
    EXPECT_EQ(tokens.back(), 5);
    total += static_cast<double>(tokens.size());
  }
  // 1 + 1/2 + 1/4 + 1/8 + 1/16; the standard error over 20000 draws is about 0.008.
  EXPECT_NEAR(total / kSeeds, 1.9375, 0.04);
}

TEST(ForcedAcceptance, TheAcceptDrawIsNotTheSamplingDraw) {
  // Another key than the sampler's uniform_for_step(seed, step): the two must not be equal.
  int equal = 0;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    equal += forced_acceptance_uniform(seed, 3) == kernels::cpu::uniform_for_step(seed, 3);
  }
  EXPECT_EQ(equal, 0);
}

}  // namespace
}  // namespace tachyon::runner
