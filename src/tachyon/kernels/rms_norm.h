// RMSNorm: out = in / sqrt(mean(in^2) + eps) * weight, per row. Math in f32, as HF does.
#pragma once

#include <cstdint>

namespace tachyon::kernels::cpu {

// out, in: [rows, dim] f32 (may alias); weight: [dim] f32.
void rms_norm(float* out, const float* in, const float* weight, int64_t rows, int64_t dim, float eps);

}  // namespace tachyon::kernels::cpu
