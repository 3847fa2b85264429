// The second half of every CPU attention (attention.cpp, mla_attention.cpp,
// sparse_mla_attention.cpp), for one (query, head): the scores become softmax weights (in f32,
// the largest score subtracted first, so exp never overflows), and the output is the weighted sum
// of the value rows, visited in the scores' order. The kernels differ only in how they score and
// where a value row lives, so both stay with them: the scores come in, `value_row(j)` finds row j.
// Each step keeps the order and the roundings the three kernels had, so their outputs are the
// same bits as before (tests/unit/test_attention_kernels.cpp). The dense attention calls the two
// halves itself (softmax_in_place, then fused_weighted_sum a chunk of keys at a time); its
// ValueSum::kFused here is the same sum in one call.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/kernels/cpu/fixed_order_gemm.h"

namespace tachyon::kernels::cpu {

// How a weighted value is added to the output. The dense attention adds with one fused
// multiply-add per element (fused_axpy: the same bits on every instruction set); the MLA kernels
// have always multiplied, rounded, then added, and keep it, so that their results do not move.
enum class ValueSum { kFused, kMultiplyThenAdd };

// scores: [count] q.k * scale -> their softmax weights, in place: exp(score - max) summed in the
// scores' order, each divided by that sum (the roundings every kernel has always had).
inline void softmax_in_place(std::span<float> scores) {
  // The largest score in 8 running maxima (the compiler's vector lanes; one chain waits on each
  // comparison): the same value in any order, a NaN skipped in both (std::max keeps its first).
  constexpr size_t kLanes = 8;
  float lane_max[kLanes];
  std::fill(lane_max, lane_max + kLanes, -INFINITY);
  size_t j = 0;
  for (; j + kLanes <= scores.size(); j += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) lane_max[l] = std::max(lane_max[l], scores[j + l]);
  }
  for (; j < scores.size(); ++j) lane_max[0] = std::max(lane_max[0], scores[j]);
  const float max_score = *std::max_element(lane_max, lane_max + kLanes);
  float denominator = 0.0f;
  for (float& score : scores) {
    score = std::exp(score - max_score);
    denominator += score;
  }
  for (float& score : scores) score /= denominator;  // a loop of its own: it vectorizes
}

// out: [width] = sum_j softmax(scores)_j * value_row(j)[0, width), j in scores' order;
// scores: [count] q.k * scale, overwritten with the weights. value_row(j) -> const float*
// [width]. count 0 leaves out all zeros. `isa` is used by ValueSum::kFused only.
template <typename ValueRow>
void softmax_weighted_sum(float* out, std::span<float> scores, int64_t width, ValueSum sum, GemmIsa isa,
                          const ValueRow& value_row) {
  softmax_in_place(scores);
  std::fill(out, out + width, 0.0f);
  if (sum == ValueSum::kFused) {
    std::vector<const float*> rows(scores.size());
    for (size_t j = 0; j < scores.size(); ++j) rows[j] = value_row(static_cast<int64_t>(j));
    fused_weighted_sum(isa, out, scores.data(), rows.data(), static_cast<int64_t>(scores.size()), width);
    return;
  }
  for (size_t j = 0; j < scores.size(); ++j) {
    const float* value = value_row(static_cast<int64_t>(j));
    for (int64_t d = 0; d < width; ++d) out[d] += scores[j] * value[d];
  }
}

}  // namespace tachyon::kernels::cpu
