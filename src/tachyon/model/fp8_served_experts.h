// The form in which an FP8 run serves its routed experts: one constant that the runner factory
// loads (app/runner_factory.cpp) and bench latency's floor counts (model/decode_bytes.h).
#pragma once

#include "tachyon/model/fp8_projections.h"

namespace tachyon::model {

// kBf16 until the E4M3 grouped products (kernels/cuda/moe.h) have passed on the GPU machine:
// MoeFp8Experts.* and CudaFp8VsCpu's *_fp8_experts cases.
inline constexpr Fp8RoutedExperts kServedFp8RoutedExperts = Fp8RoutedExperts::kBf16;

}  // namespace tachyon::model
