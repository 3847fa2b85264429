// FP8 weights on the GPU beyond the decode GEMV (gemv.h fp8_gemv): the dequantization that lets a
// product of more rows than the GEMV serves run through cuBLASLt in bf16.
//
// Why dequantize rather than an FP8 GEMM: cuBLASLt's FP8 products take FP8 activations too, so
// they would add activation quantization error that the decode GEMV (bf16 activations) does not
// have, and a sequence's logits would depend on how many rows shared its step. Dequantizing one
// projection into a bf16 scratch costs reading 1 and writing 2 bytes per weight (about 9 ms per
// step for an 8B model on an H200): it keeps prefill and large batches correct, not fast. A
// weight-only FP8 tensor-core GEMM is the next step (docs/gpu.md).
// Test: tests/gpu/test_gemv.cpp (gpu_fp8_dequantize).
#pragma once

#include <cstdint>

#include "tachyon/kernels/cuda/gemm.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// out[r, c] = bf16(fp8[r, c] * scale[r, c / 128]) for weight [n, k] E4M3, scale [n, ceil(k / 128)]
// f32, out [n, k] bf16 (round to nearest even). k a positive multiple of 8, out 16-byte and weight
// 8-byte aligned (checked). No allocation, no synchronization: graph-capture safe.
void fp8_dequantize(bf16* out, const uint8_t* weight, const float* scale, int64_t n, int64_t k, cudaStream_t stream);

}  // namespace tachyon::kernels::cuda
