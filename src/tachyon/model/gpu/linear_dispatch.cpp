#include "tachyon/model/gpu/linear_dispatch.h"

#include "tachyon/kernels/cuda/gemv.h"

namespace tachyon::model::gpu {

namespace kc = kernels::cuda;

bool LinearDispatch::linear_silu(LinearRole role, LinearShape shape, bf16* act, const bf16* in,
                                 const LinearWeight& weight, const bf16* bias, int64_t m, cudaStream_t stream) {
  if (m <= 0 || !stream_local(role, shape, weight, m)) return false;  // not our GEMV at m rows
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
