// The number of values a config's checkpoint holds: the elements of every tensor that
// model::expected_tensors lists (tied embeddings once, MTP modules where the config has them).
// Shared by test_make_model (the presets' published parameter counts) and test_weight_alignment
// (every array the loader filled is checked).
#pragma once

#include <cstdint>

#include "tachyon/model/model_weights.h"

namespace tachyon::testing {

inline int64_t expected_elements(const model::ModelConfig& config) {
  int64_t total = 0;
  for (const auto& [name, shape] : model::expected_tensors(config)) {
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    total += count;
  }
  return total;
}

}  // namespace tachyon::testing
