#include "tachyon/kernels/rms_norm.h"

#include <cmath>

#include "tachyon/kernels/cpu/parallel_for.h"

namespace tachyon::kernels::cpu {

void rms_norm(float* out, const float* in, const float* weight, int64_t rows, int64_t dim, float eps) {
  parallel_for(rows, rows > 1, [=](int64_t r) {
    const float* x = in + r * dim;
    float* y = out + r * dim;
    double sum_squares = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum_squares += static_cast<double>(x[i]) * x[i];
    float inv_rms = 1.0f / std::sqrt(static_cast<float>(sum_squares / dim) + eps);
    for (int64_t i = 0; i < dim; ++i) y[i] = weight[i] * (x[i] * inv_rms);
  });
}

}  // namespace tachyon::kernels::cpu
