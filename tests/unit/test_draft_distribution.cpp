// Draft verification keeps the target's distribution when sampling is not seeded by the user (the
// engine then draws a seed per request, so the draw is still a pure function of seed and
// position): over many request seeds, the first emitted token of a step with one draft follows
// softmax(row 0) whatever the draft is, and the token after an accepted draft follows softmax(row
// 1). Chi-square tests on a 6-token vocabulary, with fixed seeds (no flakes); a control shows
// that a biased acceptance (taking the draft whenever the target would accept it with
// probability p(draft), then drawing again) is rejected by the same statistic.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "tachyon/runner/plan_sampling.h"

namespace tachyon::runner {
namespace {

constexpr int64_t kDistVocab = 6;
constexpr int kDistDraws = 30000;
// Chi-square critical value for 5 degrees of freedom at p = 0.001.
constexpr double kDistCritical = 20.52;

std::array<double, kDistVocab> dist_softmax(const std::array<float, kDistVocab>& logits) {
  std::array<double, kDistVocab> p{};
  double sum = 0;
  for (int64_t i = 0; i < kDistVocab; ++i) sum += p[i] = std::exp(static_cast<double>(logits[i]));
  for (double& v : p) v /= sum;
  return p;
}

double dist_chi_square(const std::array<int64_t, kDistVocab>& counts, const std::array<double, kDistVocab>& p) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  double chi = 0;
  for (int64_t i = 0; i < kDistVocab; ++i) {
    const double expected = p[i] * static_cast<double>(n);
    chi += (static_cast<double>(counts[i]) - expected) * (static_cast<double>(counts[i]) - expected) / expected;
  }
  return chi;
}

// One verify step of a sequence carrying one draft, seeded by `seed`; its emitted tokens.
std::vector<int32_t> dist_verify(const std::array<float, kDistVocab>& row0, const std::array<float, kDistVocab>& row1,
                                 int32_t draft, uint64_t seed, const std::shared_ptr<const core::SamplingParams>& params) {
  core::StepPlan plan;
  plan.block_size = 16;
  plan.token_ids = {1, draft};
  plan.positions = {7, 8};
  plan.slot_mapping = {7, 8};
  plan.logits_rows = {0, 1};
  core::ScheduledSequence s;
  s.sequence_id = 1;
  s.num_tokens = 2;
  s.num_computed = 7;
  s.block_table = {0};
  s.sample = true;
  s.draft_tokens = {draft};
  s.params = params;
  s.seed = seed;
  s.num_output_tokens = 3;
  plan.sequences = {s};
  std::vector<float> logits(row0.begin(), row0.end());
  logits.insert(logits.end(), row1.begin(), row1.end());
  const core::StepOutput out = sample_plan_rows(plan, logits, kDistVocab);
  std::vector<int32_t> tokens;
  for (const core::SampledToken& t : out.sequences.at(0).tokens) tokens.push_back(t.token);
  return tokens;
}

TEST(DraftDistribution, VerifiedStepsKeepTheTargetsDistribution) {
  const std::array<float, kDistVocab> row0 = {1.0f, 0.2f, -0.5f, 0.7f, 0.0f, -1.2f};
  const std::array<float, kDistVocab> row1 = {-0.3f, 0.9f, 0.1f, -1.0f, 0.5f, 0.0f};
  core::SamplingParams sampling;
  sampling.temperature = 1.0f;
  const auto params = std::make_shared<const core::SamplingParams>(sampling);
  const std::array<double, kDistVocab> p0 = dist_softmax(row0), p1 = dist_softmax(row1);
  for (int32_t draft : {0, 3, 5}) {  // the likeliest, a middling and the least likely token
    std::mt19937_64 seeds(1000 + static_cast<uint64_t>(draft));
    std::array<int64_t, kDistVocab> first{}, after_accept{};
    std::array<int64_t, kDistVocab> biased{};
    std::mt19937_64 coin(7);
    for (int n = 0; n < kDistDraws; ++n) {
      const std::vector<int32_t> tokens = dist_verify(row0, row1, draft, seeds(), params);
      ASSERT_FALSE(tokens.empty());
      ++first[static_cast<size_t>(tokens[0])];
      if (tokens[0] == draft) {
        ASSERT_EQ(tokens.size(), 2u) << "an accepted draft is followed by the next row's token";
        ++after_accept[static_cast<size_t>(tokens[1])];
      } else {
        ASSERT_EQ(tokens.size(), 1u) << "a rejected draft ends the list";
      }
      // The control: accept the draft with probability p(draft), else emit the target's draw
      // (which may itself be the draft): the draft is over-represented.
      const bool take = std::uniform_real_distribution<double>(0, 1)(coin) < p0[static_cast<size_t>(draft)];
      ++biased[static_cast<size_t>(take ? draft : tokens[0])];
    }
    const double chi_first = dist_chi_square(first, p0);
    const double chi_after = dist_chi_square(after_accept, p1);
    EXPECT_LT(chi_first, kDistCritical) << "draft " << draft << ": the first token's distribution moved";
    EXPECT_LT(chi_after, kDistCritical) << "draft " << draft << ": the token after an accepted draft moved";
    EXPECT_GT(dist_chi_square(biased, p0), 10 * kDistCritical)
        << "draft " << draft << ": the statistic must see a biased acceptance";
    int64_t accepted = 0;
    for (int64_t c : after_accept) accepted += c;
    EXPECT_GT(accepted, 1000) << "enough accepted drafts to test the second row";
  }
}

}  // namespace
}  // namespace tachyon::runner
