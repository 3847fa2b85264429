// Rotary position embedding, HF "rotate_half" layout: dimension i pairs with i + head_dim/2
// (not interleaved). The frequencies come from model/rope.h, which owns the scaling variants.
#pragma once

#include <cstdint>

namespace tachyon::kernels::cpu {

// x: [tokens, heads, head_dim] f32, rotated in place; positions: [tokens];
// inv_freq: [head_dim / 2] f32 (angle of pair i at position p is p * inv_freq[i]).
// cos_sin_scale multiplies cos and sin before they are applied (YaRN's attention scaling; HF
// scales the tables, so we do too, for the same f32 rounding).
void apply_rope(float* x, const int64_t* positions, const float* inv_freq, int64_t tokens, int64_t heads,
                int64_t head_dim, float cos_sin_scale = 1.0f);

}  // namespace tachyon::kernels::cpu
