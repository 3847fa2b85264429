// The form in which an FP8 run serves its routed experts: one constant that the runner factory
// loads (app/runner_factory.cpp) and bench latency's floor counts (model/decode_bytes.h).
#pragma once

#include "tachyon/model/fp8_projections.h"

namespace tachyon::model {

// kFp8: the E4M3 grouped products (kernels/cuda/moe.h) pass on the GPU machine (MoeFp8Experts.*,
// CudaFp8VsCpu's *_fp8_experts cases), an FP8 checkpoint's experts take half the memory of bf16
// ones (DeepSeek-V3's are most of its weights), and a batch-1 decode step reads half the bytes.
inline constexpr Fp8RoutedExperts kServedFp8RoutedExperts = Fp8RoutedExperts::kFp8;

}  // namespace tachyon::model
