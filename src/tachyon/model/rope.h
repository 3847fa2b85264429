// RoPE inverse frequencies for each rope_scaling variant, computed in f32 exactly as HF
// transformers' ROPE_INIT_FUNCTIONS do, so that long positions round the same way. YaRN also
// scales cos/sin (rope_attention_scaling) and, in DeepSeek's latent attention, the softmax
// (rope_softmax_mscale). Tests: tests/unit/test_deepseek.cpp (yarn), test_model_config.cpp.
#pragma once

#include <vector>

#include "tachyon/model/model_config.h"

namespace tachyon::model {

// [rope_dim / 2] frequencies; the angle of pair i at position p is p * inv_freq[i].
// rope_dim is head_dim, or qk_rope_head_dim under MLA.
std::vector<float> rope_inv_freq(const ModelConfig& config);

// The factor cos and sin are multiplied by (transformers' attention_scaling): 1 except for yarn,
// where it is attention_factor when given, else get_mscale(factor, mscale) /
// get_mscale(factor, mscale_all_dim) when both are given, else get_mscale(factor).
double rope_attention_scaling(const ModelConfig& config);

// DeepseekV3Attention's extra softmax factor: get_mscale(factor, mscale_all_dim)^2 when the rope
// is scaled and mscale_all_dim is given, else 1. Multiplies qk_head_dim^-0.5.
double rope_softmax_mscale(const ModelConfig& config);

// YaRN's magnitude correction: 1 for scale <= 1, else 0.1 * mscale * ln(scale) + 1.
double yarn_get_mscale(double scale, double mscale = 1.0);

// x: [rows, dim] in place: [x0, x1, x2, x3, ...] -> [x0, x2, ... | x1, x3, ...] per row. The
// interleaved rope layout (transformers' apply_rotary_pos_emb_interleave) is this followed by the
// rotate-half rope; its output keeps the de-interleaved order, as transformers' does.
void deinterleave_rope_pairs(float* x, int64_t rows, int64_t dim);

}  // namespace tachyon::model
