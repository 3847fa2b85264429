// Which instruction set runs the fixed-order product on this CPU (fixed_order_gemm.h): the answer
// changes the speed only, never the bits.
#include "tachyon/kernels/cpu/fixed_order_gemm.h"

#include "tachyon/base/check.h"

namespace tachyon::kernels::cpu {

bool cpu_runs(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kPortable:
      return true;
#if defined(__x86_64__)
    // __builtin_cpu_supports also checks that the OS saves the wide registers (XGETBV).
    case GemmIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    case GemmIsa::kAvx2:
    case GemmIsa::kAvx512:
      return false;
#endif
  }
  return false;
}

GemmIsa best_gemm_isa() {
  static const GemmIsa best = cpu_runs(GemmIsa::kAvx512) ? GemmIsa::kAvx512
                              : cpu_runs(GemmIsa::kAvx2) ? GemmIsa::kAvx2
                                                         : GemmIsa::kPortable;
  return best;
}

std::string_view gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::kPortable:
      return "portable";
    case GemmIsa::kAvx2:
      return "avx2";
    case GemmIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

namespace {

// One dispatch for both weight types (W = float or uint16_t bf16 bits).
template <typename W>
void gemm_columns(GemmIsa isa, float* out, const float* in, const W* weight, int64_t rows, int64_t in_features,
                  int64_t out_features, int64_t col_begin, int64_t col_end) {
  TACHYON_CHECK(cpu_runs(isa)) << "internal: this CPU does not run the " << gemm_isa_name(isa) << " product";
  switch (isa) {
    case GemmIsa::kPortable:
      return gemm_columns_portable(out, in, weight, rows, in_features, out_features, col_begin, col_end);
    case GemmIsa::kAvx2:
      return gemm_columns_avx2(out, in, weight, rows, in_features, out_features, col_begin, col_end);
    case GemmIsa::kAvx512:
      return gemm_columns_avx512(out, in, weight, rows, in_features, out_features, col_begin, col_end);
  }
}

}  // namespace

void fixed_order_gemm_columns(GemmIsa isa, float* out, const float* in, const float* weight, int64_t rows,
                              int64_t in_features, int64_t out_features, int64_t col_begin, int64_t col_end) {
  gemm_columns(isa, out, in, weight, rows, in_features, out_features, col_begin, col_end);
}

void fixed_order_gemm_columns(GemmIsa isa, float* out, const float* in, const uint16_t* weight, int64_t rows,
                              int64_t in_features, int64_t out_features, int64_t col_begin, int64_t col_end) {
  gemm_columns(isa, out, in, weight, rows, in_features, out_features, col_begin, col_end);
}

float fixed_order_dot(GemmIsa isa, const float* x, const float* w, int64_t k) {
  switch (isa) {
    case GemmIsa::kAvx2:
      return dot_avx2(x, w, k);
    case GemmIsa::kAvx512:
      return dot_avx512(x, w, k);
    case GemmIsa::kPortable:
      break;
  }
  return dot_portable(x, w, k);
}

void fused_axpy(GemmIsa isa, float* y, float a, const float* x, int64_t n) {
  switch (isa) {
    case GemmIsa::kAvx2:
      return axpy_avx2(y, a, x, n);
    case GemmIsa::kAvx512:
      return axpy_avx512(y, a, x, n);
    case GemmIsa::kPortable:
      break;
  }
  axpy_portable(y, a, x, n);
}

void fixed_order_dots(GemmIsa isa, float* out, const float* x, const float* const* rows, int64_t count, int64_t k,
                      float scale) {
  if (isa == GemmIsa::kAvx512) return dots_avx512(out, x, rows, count, k, scale);
  if (isa == GemmIsa::kAvx2) return dots_avx2(out, x, rows, count, k, scale);
  for (int64_t j = 0; j < count; ++j) out[j] = fixed_order_dot(isa, x, rows[j], k) * scale;
}

void fused_weighted_sum(GemmIsa isa, float* out, const float* weights, const float* const* rows, int64_t count,
                        int64_t n) {
  if (isa == GemmIsa::kAvx512) return weighted_sum_avx512(out, weights, rows, count, n);
  if (isa == GemmIsa::kAvx2) return weighted_sum_avx2(out, weights, rows, count, n);
  for (int64_t j = 0; j < count; ++j) fused_axpy(isa, out, weights[j], rows[j], n);
}

}  // namespace tachyon::kernels::cpu
