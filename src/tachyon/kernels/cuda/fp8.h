// FP8 on the GPU beyond the decode GEMV (gemv.h fp8_gemv): the products of more rows than the
// GEMV serves.
//
// Those run as FP8 x FP8 on the tensor cores through cuBLASLt's 128-wide block scaling
// (gemm.h linear_fp8): the activations are quantized per row and 128 columns here
// (fp8_quantize_rows), as DeepSeek's own inference quantizes them, and the weights keep their
// per-row-and-128-column factors. That adds activation rounding the decode GEMV (bf16 activations)
// does not have: a prefill or a step of more than 8 rows differs from a decode of the same token
// by about one FP8 rounding of its inputs (tests/gpu/test_cuda_fp8.cpp states the tolerance).
//
// fp8_dequantize is the fallback where cuBLASLt has no block-scaled algorithm for a shape: one
// projection dequantized into a bf16 scratch (reading 1 and writing 2 bytes per weight) and a
// bf16 product. Tests: tests/gpu/test_fp8_kernels.cpp, tests/gpu/test_fp8_gemm.cpp.
#pragma once

#include <cstdint>

#include "tachyon/kernels/cuda/gemm.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// out[r, c] = bf16(fp8[r, c] * scale[r, c / 128]) for weight [n, k] E4M3, scale [n, ceil(k / 128)]
// f32, out [n, k] bf16 (round to nearest even). k a positive multiple of 8, out 16-byte and weight
// 8-byte aligned (checked). No allocation, no synchronization: graph-capture safe.
void fp8_dequantize(bf16* out, const uint8_t* weight, const float* scale, int64_t n, int64_t k, cudaStream_t stream);

// in [m, k] bf16 -> out [padded_m, k] E4M3 and scale [ceil(k / 128), padded_m] f32 (the row
// index fastest: the layout cuBLASLt's 128-wide block scaling reads), per row and 128 columns
// exactly as the CPU's quantize_fp8_blocks(in, m, k, 1, 128) (tensor/fp8.h): factor amax / 448
// (1 for an all-zero block), value RNE(x / factor) saturated at +-448. Rows m..padded_m-1 are
// zero rows (codes 0, factor 1): a product of padded_m rows gives zeros there. padded_m >= m,
// k a positive multiple of 16 and out 16-byte aligned (checked). Graph-capture safe.
void fp8_quantize_rows(uint8_t* out, float* scale, const bf16* in, int64_t m, int64_t padded_m, int64_t k,
                       cudaStream_t stream);

// fp8_quantize_rows with one factor per row (over all k) instead of per 128 columns: scale
// [padded_m], as the CPU's quantize_fp8_blocks(in, m, k, 1, k); the input form of
// GemmRunner::linear_fp8_per_row (per-token activations, as per-channel FP8 checkpoints specify).
// Padding rows, checks and graph-capture safety as fp8_quantize_rows.
void fp8_quantize_rows_per_token(uint8_t* out, float* scale, const bf16* in, int64_t m, int64_t padded_m, int64_t k,
                                 cudaStream_t stream);

}  // namespace tachyon::kernels::cuda
