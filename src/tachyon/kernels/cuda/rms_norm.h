// RMSNorm on the GPU, plain and fused with the residual add that precedes every norm of a
// decoder layer after the first. CPU twin: kernels/rms_norm.h. Math in f32; like HF, the
// normalized value is rounded to bf16 before it is multiplied by the (bf16) weight.
#pragma once

#include <cstdint>

#include "tachyon/kernels/cuda/fp8_rows.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// Both: dim % 8 == 0 and dim <= 32768, every pointer 16-byte aligned (rows are loaded as 8-bf16
// vectors into registers), checked on the host; rows == 0 launches nothing. With `fp8` (not
// empty; dim % 128 == 0 unless fp8.per_token) the kernel also writes its output's E4M3 copy for
// the FP8 product that reads it (fp8_rows.h), its padding rows included, in the same launch.

// out, in: [rows, dim] bf16 (may alias); weight: [dim] bf16.
void rms_norm(bf16* out, const bf16* in, const bf16* weight, int64_t rows, int64_t dim, float eps,
              cudaStream_t stream, Fp8Rows fp8 = {});

// residual += in (rounded to bf16, as HF adds bf16 hidden states); out = rms_norm(residual) * weight.
// out, residual, in: [rows, dim] bf16, pairwise distinct (no aliasing); weight: [dim] bf16.
void add_rms_norm(bf16* out, bf16* residual, const bf16* in, const bf16* weight, int64_t rows, int64_t dim,
                  float eps, cudaStream_t stream, Fp8Rows fp8 = {});

}  // namespace tachyon::kernels::cuda
