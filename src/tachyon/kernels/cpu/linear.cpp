#include "tachyon/kernels/linear.h"

#include <cblas.h>

#include <cmath>
#include <cstring>

#include "tachyon/base/check.h"

namespace tachyon::kernels::cpu {

void linear(float* out, const float* in, const float* weight, const float* bias, int64_t rows, int64_t in_features,
            int64_t out_features) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(rows), static_cast<int>(out_features),
              static_cast<int>(in_features), 1.0f, in, static_cast<int>(in_features), weight,
              static_cast<int>(in_features), 0.0f, out, static_cast<int>(out_features));
  if (bias != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out_features; ++o) out[r * out_features + o] += bias[o];
    }
  }
}

void silu_and_mul(float* out, const float* gate_up, int64_t rows, int64_t dim) {
#pragma omp parallel for if (rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const float* gate = gate_up + r * 2 * dim;
    const float* up = gate + dim;
    for (int64_t i = 0; i < dim; ++i) {
      float g = gate[i];
      out[r * dim + i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  }
}

void embedding(float* out, const int32_t* ids, const float* table, int64_t rows, int64_t vocab, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    TACHYON_CHECK(ids[r] >= 0 && ids[r] < vocab) << "token id " << ids[r] << " is outside the vocabulary [0, " << vocab << ")";
    std::memcpy(out + r * dim, table + static_cast<int64_t>(ids[r]) * dim, dim * sizeof(float));
  }
}

void add_inplace(float* out, const float* in, int64_t count) {
  for (int64_t i = 0; i < count; ++i) out[i] += in[i];
}

}  // namespace tachyon::kernels::cpu
