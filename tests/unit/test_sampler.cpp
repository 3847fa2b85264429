// Sampler: every step's exact effect on hand-made logits, the stateless seeded draw, and a
// statistical check that the draws follow the softmax. Run: ctest -R sampler.
#include "tachyon/kernels/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <set>
#include <vector>

#include "tachyon/base/check.h"

namespace tachyon::engine {
using namespace tachyon::core; using namespace tachyon::kernels::cpu;
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Logits whose softmax is exactly `probs` (log of each).
std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> logits;
  for (double p : probs) logits.push_back(p > 0 ? static_cast<float>(std::log(p)) : -kInf);
  return logits;
}

std::vector<double> softmax(const std::vector<float>& logits) {
  double max = -kInf, sum = 0;
  for (float l : logits) max = std::max<double>(max, l);
  std::vector<double> p;
  for (float l : logits) p.push_back(std::exp(l - max)), sum += p.back();
  for (double& x : p) x /= sum;
  return p;
}

// Samples from a copy (sample_token uses its input as scratch).
SampledToken sample(std::vector<float> logits, const SamplingParams& params, const SamplingContext& context = {}) {
  return sample_token(logits, params, context);
}

SamplingContext seeded(uint64_t seed, std::span<const int32_t> outputs = {}) {
  SamplingContext c;
  c.seed = seed;
  c.output_tokens = outputs;
  return c;
}

std::vector<int32_t> kept(const std::vector<float>& logits) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] > -kInf) ids.push_back(static_cast<int32_t>(i));
  }
  return ids;
}

// Frequencies of `draws` samples over seeds 0..draws-1 against `expected` probabilities:
// Pearson chi-square, compared with a bound well above the 0.999 quantile for its degrees of freedom.
void expect_follows(const std::vector<float>& logits, const SamplingParams& params, const std::vector<double>& expected,
                    int draws) {
  std::vector<int> counts(logits.size(), 0);
  for (int s = 0; s < draws; ++s) ++counts[sample(logits, params, seeded(static_cast<uint64_t>(s))).token];
  double chi2 = 0;
  int dof = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double e = expected[i] * draws;
    if (e == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
      continue;
    }
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++dof;
  }
  // 0.999 quantile: dof 3 -> 16.3, 5 -> 20.5, 7 -> 24.3; 3 * dof + 12 is above each.
  EXPECT_LT(chi2, 3.0 * dof + 12.0) << "dof " << dof;
}

TEST(Sampler, GreedyArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  EXPECT_EQ(sample({0.1f, 2.0f, -1.0f, 1.5f}, p).token, 1);
  EXPECT_EQ(sample({0.1f, 3.0f, -1.0f, 3.0f, 3.0f}, p).token, 1);
  EXPECT_EQ(sample({-5.0f, -5.0f}, p).token, 0);
}

TEST(Sampler, TinyTemperatureIsGreedy) {
  const std::vector<float> logits = {0.5f, 1.0f, 0.999f, -3.0f, 0.0f};
  for (float t : {1e-5f, 1e-6f, 1e-30f, 1e-45f}) {  // gap 0.001 / t >= 100 nats
    SamplingParams p;
    p.temperature = t;
    for (uint64_t s = 0; s < 200; ++s) ASSERT_EQ(sample(logits, p, seeded(s)).token, 1) << "t " << t;
  }
}

TEST(Sampler, TopK1IsGreedy) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.37f * i) * 4.0f;
  logits[17] = logits[412] = 9.0f;  // tie at the top: the lower id wins, as greedy
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams top1;
  top1.top_k = 1;
  top1.temperature = 1.5f;
  const int32_t expected = sample(logits, greedy).token;
  EXPECT_EQ(expected, 17);
  for (uint64_t s = 0; s < 100; ++s) ASSERT_EQ(sample(logits, top1, seeded(s)).token, expected);
}

TEST(Sampler, TopKKeepsKLargestTiesToLowerId) {
  std::vector<float> logits = {1.0f, 5.0f, 3.0f, 5.0f, 3.0f, -kInf, 4.0f};
  apply_top_k(logits, 4);
  EXPECT_EQ(kept(logits), (std::vector<int32_t>{1, 2, 3, 6}));
  EXPECT_EQ(logits[2], 3.0f);  // kept values untouched
  std::vector<float> few = {1.0f, -kInf, 2.0f};
  apply_top_k(few, 5);
  EXPECT_EQ(kept(few), (std::vector<int32_t>{0, 2}));
}

TEST(Sampler, TopPKeepsExactlyTheNucleus) {
  // Sorted probabilities 0.4, 0.25, 0.15, 0.1, 0.06, 0.04 spread over ids in a scrambled order.
  const std::vector<double> probs = {0.1, 0.4, 0.04, 0.25, 0.06, 0.15};
  const std::vector<std::pair<float, std::vector<int32_t>>> cases = {
      {0.3f, {1}},             // 0.4 reaches 0.3
      {0.5f, {1, 3}},          // 0.4 < 0.5 <= 0.65
      {0.7f, {1, 3, 5}},       // 0.65 < 0.7 <= 0.8
      {0.85f, {0, 1, 3, 5}},   // 0.8 < 0.85 <= 0.9
      {0.95f, {0, 1, 3, 4, 5}},
      {0.99f, {0, 1, 2, 3, 4, 5}},
  };
  for (const auto& [top_p, expected] : cases) {
    std::vector<float> logits = logits_of(probs);
    apply_top_p(logits, top_p);
    EXPECT_EQ(kept(logits), expected) << "top_p " << top_p;
  }
  // Over a large vocabulary (the growing partial sort): 300 tokens of 1/600 each, then 0.5 on one.
  std::vector<double> wide(5000, 0.0);
  for (int i = 0; i < 300; ++i) wide[10 + 13 * i] = 1.0 / 600;
  wide[4321] = 0.5;
  std::vector<float> logits = logits_of(wide);
  apply_top_p(logits, 0.7505f);  // needs 0.5 + 151 / 600: the peak and the 151 lowest ids of the tie
  std::vector<int32_t> expected = {};
  for (int i = 0; i < 151; ++i) expected.push_back(10 + 13 * i);
  expected.push_back(4321);
  EXPECT_EQ(kept(logits), expected);
}

TEST(Sampler, TopPRenormalizesAfterTopK) {
  // top_k=2 keeps {0.4, 0.25}: renormalized 0.615, 0.385; top_p 0.6 then keeps only the first.
  SamplingParams p;
  p.top_k = 2;
  p.top_p = 0.6f;
  const std::vector<float> logits = logits_of({0.1, 0.4, 0.04, 0.25, 0.06, 0.15});
  for (uint64_t s = 0; s < 100; ++s) ASSERT_EQ(sample(logits, p, seeded(s)).token, 1);
}

TEST(Sampler, MinPDropsBelowFractionOfBest) {
  std::vector<float> logits = logits_of({0.1, 0.4, 0.04, 0.25, 0.06, 0.15});
  apply_min_p(logits, 0.3f);  // threshold 0.12
  EXPECT_EQ(kept(logits), (std::vector<int32_t>{1, 3, 5}));
  std::vector<float> all = logits_of({0.5, 0.5});
  apply_min_p(all, 1.0f);  // ties with the best survive even at min_p = 1
  EXPECT_EQ(kept(all), (std::vector<int32_t>{0, 1}));
}

TEST(Sampler, RepetitionPenaltyDividesPositiveMultipliesNegativeOncePerToken) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  std::vector<float> logits = {4.0f, -1.0f, 3.0f, 0.0f, 6.0f};
  const std::vector<int32_t> prompt = {0, 0, 1, 0, 3};
  const std::vector<int32_t> output = {1, 0, 1};
  apply_penalties(logits, p, prompt, output);
  // 0 appears 4 times and 1 three times over prompt+output: still penalized once.
  EXPECT_EQ(logits, (std::vector<float>{2.0f, -2.0f, 3.0f, 0.0f, 6.0f}));
}

TEST(Sampler, FrequencyAndPresencePenaltiesCountOutputsOnly) {
  std::vector<float> base = {1.0f, 1.0f, 1.0f, 1.0f};
  const std::vector<int32_t> prompt = {0, 0, 0, 3};
  const std::vector<int32_t> output = {1, 2, 1, 1};

  SamplingParams freq;
  freq.frequency_penalty = 0.5f;
  std::vector<float> f = base;
  apply_penalties(f, freq, prompt, output);
  EXPECT_EQ(f, (std::vector<float>{1.0f, -0.5f, 0.5f, 1.0f}));

  SamplingParams presence;
  presence.presence_penalty = 0.25f;
  std::vector<float> q = base;
  apply_penalties(q, presence, prompt, output);
  EXPECT_EQ(q, (std::vector<float>{1.0f, 0.75f, 0.75f, 1.0f}));

  SamplingParams all;  // repetition first, then frequency, then presence
  all.repetition_penalty = 2.0f;
  all.frequency_penalty = 0.5f;
  all.presence_penalty = -1.0f;
  std::vector<float> a = {4.0f, 4.0f, -2.0f, 4.0f};
  apply_penalties(a, all, prompt, output);
  EXPECT_EQ(a, (std::vector<float>{2.0f, 2.0f - 1.5f + 1.0f, -4.0f - 0.5f + 1.0f, 2.0f}));
}

TEST(Sampler, PenaltiesChangeTheGreedyChoice) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.presence_penalty = 1.0f;
  const std::vector<int32_t> output = {2};
  SamplingContext c;
  c.output_tokens = output;
  EXPECT_EQ(sample({0.0f, 1.0f, 1.5f}, p).token, 2);
  EXPECT_EQ(sample({0.0f, 1.0f, 1.5f}, p, c).token, 1);
}

TEST(Sampler, MinTokensMasksEosAndStopIdsThenStops) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.min_tokens = 2;
  p.stop_token_ids = {3};
  const std::vector<float> logits = {0.0f, 1.0f, 9.0f, 8.0f};  // EOS = 2 is best, stop id 3 next
  std::vector<int32_t> output;
  SamplingContext c;
  c.eos_token_id = 2;
  for (size_t n = 0; n < 2; ++n) {
    output.assign(n, 0);
    c.output_tokens = output;
    EXPECT_EQ(sample(logits, p, c).token, 1) << n << " outputs";
  }
  output.assign(2, 0);
  c.output_tokens = output;
  EXPECT_EQ(sample(logits, p, c).token, 2);

  // ignore_eos: EOS does not stop, so it is not masked; the stop id still is.
  p.ignore_eos = true;
  output.clear();
  c.output_tokens = output;
  EXPECT_EQ(sample(logits, p, c).token, 2);
  p.ignore_eos = false;
  p.min_tokens = 0;
  EXPECT_EQ(sample(logits, p, c).token, 2);  // no min_tokens: nothing masked
}

TEST(Sampler, LogprobsAreRawLogSoftmaxAndTopNSorted) {
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 2.0f};
  const std::vector<double> probs = softmax(logits);
  SamplingParams p;
  p.logprobs = 4;
  p.temperature = 0.7f;
  p.repetition_penalty = 3.0f;  // processing must not change the reported logprobs
  p.top_k = 2;
  const std::vector<int32_t> prompt = {1, 3};
  SamplingContext c = seeded(5);
  c.prompt_tokens = prompt;
  const SampledToken t = sample(logits, p, c);
  EXPECT_NEAR(t.logprob, std::log(probs[t.token]), 1e-6);
  ASSERT_EQ(t.top.size(), 4u);
  const std::vector<int32_t> order = {1, 3, 5, 0};  // descending, tie 1/3 to the lower id
  for (size_t j = 0; j < 4; ++j) {
    EXPECT_EQ(t.top[j].token, order[j]);
    EXPECT_NEAR(t.top[j].logprob, std::log(probs[order[j]]), 1e-6);
  }

  p.logprobs = 0;
  const SampledToken only = sample(logits, p, c);
  EXPECT_TRUE(only.top.empty());
  EXPECT_NEAR(only.logprob, std::log(probs[only.token]), 1e-6);
  p.logprobs = 20;
  EXPECT_EQ(sample(logits, p, c).top.size(), logits.size());  // clamped to the vocabulary
  p.logprobs = -1;
  EXPECT_TRUE(sample(logits, p, c).top.empty());
}

TEST(Sampler, SameSeedAndStepSameTokenWhateverElseRan) {
  std::vector<float> logits(5000, 0.0f);  // uniform: every token equally likely
  SamplingParams p;
  std::vector<int32_t> first;
  for (uint64_t s = 0; s < 100; ++s) first.push_back(sample(logits, p, seeded(s)).token);
  // Interleave other requests' draws: nothing carries over between calls.
  for (uint64_t s = 100; s > 0; --s) {
    sample(logits, p, seeded(s * 7919));
    ASSERT_EQ(sample(logits, p, seeded(s - 1)).token, first[s - 1]);
  }
  const std::set<int32_t> distinct(first.begin(), first.end());
  EXPECT_GT(distinct.size(), 90u);  // different seeds give different tokens

  // The step (number of outputs) is part of the draw: one seed walks through different tokens.
  std::set<int32_t> by_step;
  std::vector<int32_t> output;
  for (int step = 0; step < 100; ++step, output.push_back(0)) by_step.insert(sample(logits, p, seeded(42, output)).token);
  EXPECT_GT(by_step.size(), 90u);
  EXPECT_EQ(uniform_for_step(42, 7), uniform_for_step(42, 7));
  EXPECT_NE(uniform_for_step(42, 7), uniform_for_step(43, 7));
}

TEST(Sampler, FrequenciesMatchSoftmaxOverSeeds) {
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.3f, -1.5f, 0.7f};
  SamplingParams p;
  expect_follows(logits, p, softmax(logits), 20000);

  p.temperature = 0.5f;  // softmax(logits / 0.5)
  std::vector<float> scaled;
  for (float l : logits) scaled.push_back(l / 0.5f);
  expect_follows(logits, p, softmax(scaled), 20000);
}

TEST(Sampler, FilteredFrequenciesMatchRenormalizedProbabilities) {
  const std::vector<double> probs = {0.1, 0.4, 0.04, 0.25, 0.06, 0.15};
  SamplingParams p;
  p.top_p = 0.85f;  // nucleus {0, 1, 3, 5}, mass 0.9
  expect_follows(logits_of(probs), p, {0.1 / 0.9, 0.4 / 0.9, 0, 0.25 / 0.9, 0, 0.15 / 0.9}, 20000);
}

TEST(Sampler, UniformIsUniformOverSteps) {
  // One seed across 20,000 steps: ten equal buckets.
  std::vector<int> buckets(10, 0);
  for (uint64_t step = 0; step < 20000; ++step) {
    const double u = uniform_for_step(12345, step);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ++buckets[static_cast<size_t>(u * 10)];
  }
  for (int b : buckets) EXPECT_NEAR(b, 2000, 200);
}

TEST(Sampler, NonFiniteLogitsStillSampleAFiniteToken) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {-kInf, nan, 0.5f, -kInf, 1.0f, nan};
  SamplingParams p;
  p.logprobs = 2;
  for (uint64_t s = 0; s < 200; ++s) {
    const SampledToken t = sample(logits, p, seeded(s));
    ASSERT_TRUE(t.token == 2 || t.token == 4) << t.token;
    ASSERT_TRUE(std::isfinite(t.logprob));
  }
  p.temperature = 0.0f;
  EXPECT_EQ(sample(logits, p).token, 4);
  // +inf wins outright, without NaN probabilities.
  p.temperature = 1.0f;
  EXPECT_EQ(sample({0.0f, kInf, 3.0f}, p, seeded(3)).token, 1);
  // Nothing finite left: a loud error, not a garbage id.
  EXPECT_THROW(sample({-kInf, nan}, p), Error);
  p.min_tokens = 1;
  p.stop_token_ids = {1};
  EXPECT_THROW(sample({-kInf, 2.0f}, p), Error);
}

TEST(Sampler, OutOfVocabularyIdsThrow) {
  SamplingParams p;
  p.repetition_penalty = 1.2f;
  const std::vector<int32_t> prompt = {0, 7};
  SamplingContext c;
  c.prompt_tokens = prompt;
  EXPECT_THROW(sample({1.0f, 2.0f}, p, c), Error);
}

TEST(Sampler, LargeVocabularyWithAllFilters) {
  // A Qwen-sized row: the filters compose and the result is one of the top_k.
  std::vector<float> logits(151936);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = 8.0f * std::sin(0.001f * i * i);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 50;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  std::vector<float> top = logits;
  apply_top_k(top, 50);
  const std::vector<int32_t> top_ids = kept(top);
  for (uint64_t s = 0; s < 20; ++s) {
    const int32_t token = sample(logits, p, seeded(s)).token;
    ASSERT_TRUE(std::binary_search(top_ids.begin(), top_ids.end(), token)) << token;
  }
  p.top_k = 0;  // top_p alone over the full vocabulary
  for (uint64_t s = 0; s < 5; ++s) ASSERT_GE(sample(logits, p, seeded(s)).token, 0);
}

}  // namespace
}  // namespace tachyon::engine
