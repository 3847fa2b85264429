// RoPE inverse frequencies for each rope_scaling variant, computed in f32 exactly as HF
// transformers' ROPE_INIT_FUNCTIONS do, so that long positions round the same way.
#pragma once

#include <vector>

#include "tachyon/model/model_config.h"

namespace tachyon::model {

// [head_dim / 2] frequencies; the angle of pair i at position p is p * inv_freq[i].
std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace tachyon::model
