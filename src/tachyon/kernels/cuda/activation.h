// SwiGLU gate on the GPU; CPU twin: kernels/linear.h `silu_and_mul`.
#pragma once

#include <cstdint>

#include "tachyon/kernels/cuda/fp8_rows.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// out: [rows, dim] bf16 = silu(gate_up[:, :dim]) * gate_up[:, dim:]; gate_up: [rows, 2 * dim] bf16.
// Math in f32, one rounding at the end. dim % 8 == 0 and out, gate_up 16-byte aligned (8-bf16
// vector loads), checked on the host; out must not overlap gate_up; rows == 0 launches nothing.
// With `fp8` (not empty) also the output's E4M3 copy for the FP8 product that reads it
// (fp8_rows.h), padding rows included, in the same launch; out may then be null (only the copy is
// written). Factors per 128 columns need dim % 128 == 0; one per row (fp8.per_token) dim % 16 == 0
// and dim <= 32768.
void silu_and_mul(bf16* out, const bf16* gate_up, int64_t rows, int64_t dim, cudaStream_t stream, Fp8Rows fp8 = {});

}  // namespace tachyon::kernels::cuda
