// Helpers the latent-attention model tests share (test_mla_latent, test_dsa, test_glm_dsa):
// deterministic prompts, a relative error, and a model's logits over a prompt fed in chunks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "tachyon/model/attention_backend.h"
#include "tachyon/model/dense_model.h"

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

}  // namespace tachyon::testing
