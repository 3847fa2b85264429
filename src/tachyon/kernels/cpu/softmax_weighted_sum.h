// The second half of every CPU attention (attention.cpp, mla_attention.cpp,
// sparse_mla_attention.cpp), for one (query, head): the scores become softmax weights (in f32,
// the largest score subtracted first, so exp never overflows), and the output is the weighted sum
// of the value rows, visited in the scores' order. The kernels differ only in how they score and
// where a value row lives, so both stay with them: the scores come in, `value_row(j)` finds row j.
// Each step keeps the order and the roundings the three kernels had, so their outputs are the
// same bits as before (tests/unit/test_attention_kernels.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include "tachyon/kernels/cpu/fixed_order_gemm.h"

namespace tachyon::kernels::cpu {

// How a weighted value is added to the output. The dense attention adds with one fused
// multiply-add per element (fused_axpy: the same bits on every instruction set); the MLA kernels
// have always multiplied, rounded, then added, and keep it, so that their results do not move.
enum class ValueSum { kFused, kMultiplyThenAdd };

// out: [width] = sum_j softmax(scores)_j * value_row(j)[0, width), j in scores' order;
// scores: [count] q.k * scale, overwritten with exp(score - max). value_row(j) -> const float*
// [width]. count 0 leaves out all zeros. `isa` is used by ValueSum::kFused only.
template <typename ValueRow>
void softmax_weighted_sum(float* out, std::span<float> scores, int64_t width, ValueSum sum, GemmIsa isa,
                          const ValueRow& value_row) {
  float max_score = -INFINITY;
  for (const float score : scores) max_score = std::max(max_score, score);
  float denominator = 0.0f;
  for (float& score : scores) {
    score = std::exp(score - max_score);
    denominator += score;
  }
  std::fill(out, out + width, 0.0f);
  for (size_t j = 0; j < scores.size(); ++j) {
    const float weight = scores[j] / denominator;
    const float* value = value_row(static_cast<int64_t>(j));
    if (sum == ValueSum::kFused) {
      fused_axpy(isa, out, weight, value, width);
    } else {
      for (int64_t d = 0; d < width; ++d) out[d] += weight * value[d];
    }
  }
}

}  // namespace tachyon::kernels::cpu
