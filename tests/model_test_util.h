// Helpers the latent-attention model tests share (test_mla_latent, test_dsa, test_glm_dsa):
// deterministic prompts, a relative error, a model's logits over a prompt fed in chunks, and the
// double-precision pieces the indexer is reimplemented from (product, rope, LayerNorm).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "tachyon/model/attention_backend.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/model/rope.h"

namespace tachyon::testing {

// `length` token ids below 512 (the tiny presets' vocabulary), different for each salt.
inline std::vector<int32_t> prompt_of(int length, int salt) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < length; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + salt * 101 + 11) % 512));
  return prompt;
}

// max |got - want| / max |want|.
template <typename Got, typename Want>
double relative_error(const std::vector<Got>& got, const std::vector<Want>& want) {
  EXPECT_EQ(got.size(), want.size());
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    worst = std::max(worst, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
  }
  return worst / scale;
}

// All logits [tokens, vocab] of `tokens` run in consecutive chunks through one sequence cache
// holding the given MLA form.
inline std::vector<float> sequence_logits(const model::DenseModel& model, const std::vector<int32_t>& tokens,
                                          int64_t chunk,
                                          model::MlaAttentionForm form = model::MlaAttentionForm::kAbsorbed) {
  model::SequenceKvCache cache(model.config(), static_cast<int64_t>(tokens.size()), form);
  std::vector<float> logits;
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(chunk)) {
    const size_t end = std::min(tokens.size(), begin + static_cast<size_t>(chunk));
    std::vector<float> part = model.forward(std::span(tokens).subspan(begin, end - begin), cache, true);
    logits.insert(logits.end(), part.begin(), part.end());
  }
  return logits;
}

// out [n, rows] = x [n, cols] @ w^T, w [rows, cols] f32, in double.
inline std::vector<double> linear_double(const std::vector<float>& w, std::span<const float> x, int64_t n,
                                         int64_t cols, int64_t rows) {
  std::vector<double> out(static_cast<size_t>(n * rows), 0.0);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t k = 0; k < cols; ++k) sum += static_cast<double>(w[r * cols + k]) * x[t * cols + k];
      out[static_cast<size_t>(t * rows + r)] = sum;
    }
  }
  return out;
}

// RoPE on dims [0, qk_rope) of each row of width `dim` (rows = tokens * heads), in double, with the
// config's inv_freq and attention scaling. Rotate-half pairs (x[i], x[i + half]); interleaved
// (transformers' apply_rotary_pos_emb_interleave) pairs (x[2i], x[2i + 1]). Either way pair i
// lands at (i, i + half).
inline void rope_double(const model::ModelConfig& c, std::vector<double>& x, const std::vector<int64_t>& positions,
                        int64_t heads, int64_t dim, bool interleaved = false) {
  const std::vector<float> inv_freq = model::rope_inv_freq(c);
  const double scaling = model::rope_attention_scaling(c);
  const int64_t half = c.qk_rope_head_dim / 2;
  std::vector<double> rotated(static_cast<size_t>(2 * half));
  for (size_t t = 0; t < positions.size(); ++t) {
    for (int64_t h = 0; h < heads; ++h) {
      double* v = x.data() + (static_cast<int64_t>(t) * heads + h) * dim;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(static_cast<float>(positions[t]) * inv_freq[static_cast<size_t>(i)]);
        const double cs = std::cos(angle) * scaling, sn = std::sin(angle) * scaling;
        const double a = interleaved ? v[2 * i] : v[i], b = interleaved ? v[2 * i + 1] : v[i + half];
        rotated[static_cast<size_t>(i)] = a * cs - b * sn;
        rotated[static_cast<size_t>(half + i)] = b * cs + a * sn;
      }
      std::copy(rotated.begin(), rotated.end(), v);
    }
  }
}

// The indexer's k_norm in double: LayerNorm (eps 1e-6, biased variance) of each row of `dim`.
inline void layer_norm_double(std::vector<double>& x, const std::vector<float>& weight, const std::vector<float>& bias,
                              int64_t rows, int64_t dim) {
  for (int64_t t = 0; t < rows; ++t) {
    double* v = x.data() + t * dim;
    double mean = 0, var = 0;
    for (int64_t d = 0; d < dim; ++d) mean += v[d] / dim;
    for (int64_t d = 0; d < dim; ++d) var += (v[d] - mean) * (v[d] - mean) / dim;
    for (int64_t d = 0; d < dim; ++d) v[d] = (v[d] - mean) / std::sqrt(var + 1e-6) * weight[d] + bias[d];
  }
}

}  // namespace tachyon::testing
