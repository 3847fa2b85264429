#include "tachyon/model/gpu/linear_dispatch.h"

#include "tachyon/kernels/cuda/gemv.h"

namespace tachyon::model::gpu {

namespace kc = kernels::cuda;

namespace {

// The longest weight row (bytes) whose product takes the SwiGLU epilogue. A warp of the fused
// kernel streams a gate row and its up row, n / 2 rows apart, instead of two neighbours; where
// rows are short the launch saved weighs more than that, where they are long it weighs less.
// Measured on an H200 at batch 1 (bench/results/2026-12-04-swiglu-epilogue-h200.json): 4 KB rows
// gain (Llama-3.2-1B bf16 step -1.8%, Llama-3.1-8B FP8 -2.3%), 8 KB rows lose (8B bf16 +1.1%).
constexpr int64_t kMaxSwigluRowBytes = 4096;

}  // namespace

bool LinearDispatch::linear_silu(LinearRole role, LinearShape shape, bf16* act, const bf16* in,
                                 const LinearWeight& weight, const bf16* bias, int64_t m, cudaStream_t stream) {
  if (m <= 0 || !stream_local(role, shape, weight, m)) return false;  // not our GEMV at m rows
  if (shape.k * (weight.fp8 != nullptr ? 1 : 2) > kMaxSwigluRowBytes) return false;
  if (weight.fp8 != nullptr) {
    if (!kc::fp8_gemv_silu_supports(m, shape.n, shape.k)) return false;
    kc::fp8_gemv_silu(act, in, weight.fp8, weight.scale, bias, m, shape.n, shape.k, stream);
  } else {
    if (!kc::gemv_silu_supports(m, shape.n, shape.k)) return false;
    kc::gemv_silu(act, in, weight.values, bias, m, shape.n, shape.k, stream);
  }
  ++swiglu_epilogues_;
  return true;
}

}  // namespace tachyon::model::gpu
