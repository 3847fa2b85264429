// Where two GPU runs of one request may part: only at a near tie of the reference run's draw.
//
// On the GPU a product's bf16 rounding depends on its row count (m): our GEMV picks rows per warp
// and a k split by m, cuBLASLt an algorithm per shape, and the runner times GEMV against cuBLASLt
// per (role, m) (runner/cuda/cuda_kernel_choice.cpp). So a request alone (m = 1), in a batch of
// five (m = 5) or verified with k drafts (m = 1 + k) can see logits that differ by a rounding, and
// a token can flip where the reference run's best two logits were that close. The tests that
// compare such runs require that near tie where a token differs, and equality everywhere else
// (graphs against eager, asynchronous against synchronous scheduling: same kernels, same bits).
// Used by test_cuda_model_runner.cpp (batch company) and test_cuda_speculative.cpp (drafts).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tachyon/core/sampled_token.h"
#include "tachyon/core/sampling_params.h"
#include "tachyon/kernels/sampling.h"

namespace tachyon::runner {

// A token may differ from the reference run's only where the reference's best two logits are
// closer than this (logit units = raw logprob units). Measured on the H200 (10 seeds, both
// variants): verify rows lie up to 1.3e-2 (relative) from the decode rows, no logit moved by more
// than 0.054, and the flips printed (4 seeds) were at gaps of at most 0.017. A flip needs the gap
// below the two tokens' shifts together, so the bound is about twice the largest shift. A wrong
// row, position or cache slot moves logits by tens of percent, and most tokens of these random
// models are no near tie (23-30% within 0.1: the speculative engine test prints the share), so a
// bug shows at a token that is none.
constexpr double kLogitTieBound = 0.1;

// The bound for a model: latent attention's logits lie twice as far from the f32 reference as
// dense attention's (runner_test_util.h logits_tolerance, 4e-2 against 2e-2: the absorbed form
// rounds twice more), and so twice as far between two bf16 runs; on the H200 a DeepSeek-V3 MTP
// run parted from the plain run at a gap of 0.110 (1 of 40 requests, 2 whole-binary runs).
inline double logit_tie_bound(bool latent_attention) { return latent_attention ? 2 * kLogitTieBound : kLogitTieBound; }

// Where `other` first leaves `reference` (the same context up to there), the reference's draw
// was a near tie:
//   greedy: its best two logprobs closer than kLogitTieBound;
//   seeded, top_k 2, temperature T: the draw keeps the best two and picks the lower id iff
//   u < p_low = 1 / (1 + exp((l_other - l_low) / T)) (the id-ascending inverse-CDF draw, u =
//   uniform_for_step(seed, output count)). The difference of two logits moves by at most
//   kLogitTieBound, which moves p_low by at most kLogitTieBound / (4 T): u lies that close to
//   p_low, or the second and third are closer than kLogitTieBound (the kept pair changes).
// `reference_logprobs` are the reference's tokens with at least 3 top logprobs (params.logprobs
// >= 3). Returns true when the two are identical; false when they part at a near tie (printed);
// a parting at no near tie, or lengths that differ, fail the test. `bound`: logit_tie_bound of the
// model (kLogitTieBound above for dense attention).
inline bool expect_same_up_to_near_tie(const std::vector<int32_t>& reference,
                                       const std::vector<core::SampledToken>& reference_logprobs,
                                       const std::vector<int32_t>& other, const core::SamplingParams& params,
                                       const std::string& what, double bound = kLogitTieBound) {
  EXPECT_EQ(other.size(), reference.size()) << what;
  EXPECT_EQ(reference_logprobs.size(), reference.size()) << what;
  if (other.size() != reference.size() || reference_logprobs.size() != reference.size()) return false;
  const auto mismatch = std::mismatch(reference.begin(), reference.end(), other.begin());
  if (mismatch.first == reference.end()) return true;
  const size_t j = static_cast<size_t>(mismatch.first - reference.begin());
  const core::SampledToken& chosen = reference_logprobs[j];
  EXPECT_GE(chosen.top.size(), 3u) << what;
  if (chosen.top.size() < 3) return false;
  const core::TokenLogprob& a = chosen.top[0];
  const core::TokenLogprob& b = chosen.top[1];
  const double gap12 = static_cast<double>(a.logprob) - b.logprob;
  const double gap23 = static_cast<double>(b.logprob) - chosen.top[2].logprob;
  if (params.temperature == 0.0f) {
    std::printf("  %s token %zu: greedy %d vs %d, reference gap %.4f\n", what.c_str(), j, *mismatch.first,
                *mismatch.second, gap12);
    EXPECT_LT(gap12, bound) << what << " token " << j << ": greedy tokens differ (" << *mismatch.first
                                     << " vs " << *mismatch.second << ") where the reference's choice was no near tie";
    return false;
  }
  const core::TokenLogprob& low = a.token < b.token ? a : b;
  const core::TokenLogprob& high = a.token < b.token ? b : a;
  const double p_low = 1.0 / (1.0 + std::exp((static_cast<double>(high.logprob) - low.logprob) / params.temperature));
  const double u = kernels::cpu::uniform_for_step(*params.seed, j);
  const double margin = std::abs(u - p_low);
  std::printf("  %s token %zu: seeded %d vs %d, reference u %.4f boundary %.4f, gap of 2nd and 3rd %.4f\n",
              what.c_str(), j, *mismatch.first, *mismatch.second, u, p_low, gap23);
  EXPECT_TRUE(margin < bound / (4.0 * params.temperature) || gap23 < bound)
      << what << " token " << j << ": seeded tokens differ (" << *mismatch.first << " vs " << *mismatch.second
      << ") where the reference's draw (u " << u << ", boundary " << p_low << ", 2nd/3rd gap " << gap23
      << ") was no near tie";
  return false;
}

}  // namespace tachyon::runner
