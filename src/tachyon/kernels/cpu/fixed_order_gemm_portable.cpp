// The fixed summation order of fixed_order_gemm.h as plain loops: the spec the AVX2 and AVX-512
// paths must match bit for bit, and the path of a CPU (or an architecture) that has neither. A
// bf16 weight is widened by tensor/dtype.h's bf16_to_f32, the same conversion the loader uses to
// widen a bf16 checkpoint to f32.
#include <cmath>

#include "tachyon/kernels/cpu/fixed_order_gemm.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::kernels::cpu {
namespace {

inline float widened(float w) { return w; }
inline float widened(uint16_t bf16) { return bf16_to_f32(bf16); }

// dot_portable with the weight of either type.
template <typename W>
float dot_of(const float* x, const W* w, int64_t k) {
  float sums[kDotLanes] = {};
  for (int64_t i = 0; i < k; ++i) sums[i % kDotLanes] = std::fma(x[i], widened(w[i]), sums[i % kDotLanes]);
  for (int half = kDotLanes / 2; half >= 1; half /= 2) {
    for (int j = 0; j < half; ++j) sums[j] += sums[j + half];
  }
  return sums[0];
}

template <typename W>
void columns_of(float* out, const float* in, const W* weight, int64_t rows, int64_t in_features, int64_t out_features,
                int64_t col_begin, int64_t col_end) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = col_begin; o < col_end; ++o) {
      out[r * out_features + o] = dot_of(in + r * in_features, weight + o * in_features, in_features);
    }
  }
}

}  // namespace

float dot_portable(const float* x, const float* w, int64_t k) { return dot_of(x, w, k); }

void axpy_portable(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

void gemm_columns_portable(float* out, const float* in, const float* weight, int64_t rows, int64_t in_features,
                           int64_t out_features, int64_t col_begin, int64_t col_end) {
  columns_of(out, in, weight, rows, in_features, out_features, col_begin, col_end);
}

void gemm_columns_portable(float* out, const float* in, const uint16_t* weight, int64_t rows, int64_t in_features,
                           int64_t out_features, int64_t col_begin, int64_t col_end) {
  columns_of(out, in, weight, rows, in_features, out_features, col_begin, col_end);
}

}  // namespace tachyon::kernels::cpu
