#include "tachyon/kernels/linear.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tachyon/base/check.h"
#include "tachyon/kernels/cpu/fixed_order_gemm.h"
#include "tachyon/kernels/cpu/parallel_for.h"

namespace tachyon::kernels::cpu {
namespace {

// Below this many multiply-adds a product runs on the calling thread: a fork and join costs more
// than it saves (the canary's decode-step products are 65K-400K).
constexpr int64_t kParallelMultiplyAdds = int64_t{1} << 21;
constexpr int64_t kColumnGrain = 24;  // a multiple of every register tile's width (fixed_order_gemm_*.cpp)

// linear() for either weight type (W = float, or uint16_t bf16 bits).
template <typename W>
void linear_of(float* out, const float* in, const W* weight, const float* bias, int64_t rows, int64_t in_features,
               int64_t out_features) {
  const GemmIsa isa = best_gemm_isa();
  // Threads split the output columns, never a dot product: each element's sum is one thread's,
  // in the fixed order (fixed_order_gemm.h), so the thread count cannot change a bit.
  const bool worth_forking = rows * in_features * out_features >= kParallelMultiplyAdds;
  const int64_t chunk = worth_forking ? kColumnGrain : std::max<int64_t>(out_features, 1);
  parallel_for((out_features + chunk - 1) / chunk, worth_forking, [=](int64_t c) {
    fixed_order_gemm_columns(isa, out, in, weight, rows, in_features, out_features, c * chunk,
                             std::min(out_features, (c + 1) * chunk));
  });
  if (bias != nullptr) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t o = 0; o < out_features; ++o) out[r * out_features + o] += bias[o];
    }
  }
}

}  // namespace

void linear(float* out, const float* in, const float* weight, const float* bias, int64_t rows, int64_t in_features,
            int64_t out_features) {
  linear_of(out, in, weight, bias, rows, in_features, out_features);
}

void linear(float* out, const float* in, const uint16_t* weight, const float* bias, int64_t rows,
            int64_t in_features, int64_t out_features) {
  linear_of(out, in, weight, bias, rows, in_features, out_features);
}

void silu_and_mul(float* out, const float* gate_up, int64_t rows, int64_t dim) {
  parallel_for(rows, rows > 1, [=](int64_t r) {
    const float* gate = gate_up + r * 2 * dim;
    const float* up = gate + dim;
    for (int64_t i = 0; i < dim; ++i) {
      float g = gate[i];
      out[r * dim + i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  });
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
