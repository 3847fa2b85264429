// Checks for CUDA runtime and cuBLAS calls. Every CUDA call's status is checked and every
// kernel launch is followed by TACHYON_CUDA_CHECK_LAUNCH(): an exit code of 0 proves nothing
// on a GPU. Failures throw tachyon::Error with the call, the error name and the location.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "tachyon/base/check.h"

namespace tachyon::kernels::cuda {

// The activation and weight type of the CUDA path.
using bf16 = __nv_bfloat16;

}  // namespace tachyon::kernels::cuda

#define TACHYON_CUDA_CHECK(call)                                                                      \
  do {                                                                                                \
    const cudaError_t tachyon_cuda_status = (call);                                                   \
    TACHYON_CHECK(tachyon_cuda_status == cudaSuccess)                                                 \
        << #call << ": " << cudaGetErrorName(tachyon_cuda_status) << " ("                             \
        << cudaGetErrorString(tachyon_cuda_status) << ")";                                            \
  } while (0)

// After a <<<...>>> launch: catches bad launch configurations at once (asynchronous faults show
// at the next synchronizing call, which is checked too).
#define TACHYON_CUDA_CHECK_LAUNCH() TACHYON_CUDA_CHECK(cudaGetLastError())
