// Small-batch dense layers on the GPU: out = in @ weight^T (+ bias) for m <= 8 rows (decode),
// the same product as GemmRunner::linear (kernels/cuda/gemm.h), CPU twin kernels/linear.h
// `linear`. Test: tests/gpu/test_gemv.cpp (gpu_gemv); speed against cuBLASLt: bench/kernels/bench_gemv.cpp.
//
// Why a hand-written kernel: at m <= 8 the product is a pure weight stream (every weight byte
// is used m times, the input is a few KB), so the only thing that matters is reading the weight
// once at HBM bandwidth. Each warp owns a few weight rows and its lanes walk k in 16-byte
// chunks, several independent streaming loads in flight per lane; the m input rows are read
// through L1 (tiny and shared by every warp of an SM). When n alone gives too few warps to keep
// HBM busy, up to 4 warps of a block split k of the same rows and add their partial sums in
// shared memory: no second pass, no workspace, so a launch is graph-capture safe.
//
// The SwiGLU gate joins the gate_up product (gemv_silu: a warp owns gate rows and the up rows
// that pair with them, so the activation is its epilogue), not the down projection: a down
// kernel computing silu(gate) * up for its own chunks re-read the gate_up rows from L2 once per
// warp and ran 1.8x (m = 1) to 2.9x (m = 4) slower than silu_and_mul + gemv on an H200 at
// Llama-3-8B's down projection (bench/results/2026-12-01-gemv-vs-cublaslt-h200.json).
#pragma once

#include <cstdint>

#include "tachyon/tensor/cuda/cuda_check.h"
#include "tachyon/kernels/cuda/gemm.h"

namespace tachyon::kernels::cuda {

// Shapes gemv handles: 1 <= m <= 8, n >= 1, k a positive multiple of 8 (16-byte rows). The
// caller picks gemv or GemmRunner::linear with it; pointer alignment is checked by gemv itself.
bool gemv_supports(int64_t m, int64_t n, int64_t k);

// out[m, n] = in[m, k] @ weight[n, k]^T (+ bias[n]), all row-major; f32 accumulation, one
// rounding at the end for bf16 output.
// out: [m, n] bf16 or f32 (out_type); in: [m, k] bf16; weight: [n, k] bf16; bias: [n] bf16 or
// nullptr, only with bf16 output (as GemmRunner refuses f32 output with a bias).
// in and weight 16-byte aligned; out must not alias in, weight or bias. m == 0 does nothing.
// Checked on the host with the shape in the message. No allocation, no synchronization.
void gemv(void* out, GemmOutputType out_type, const bf16* in, const bf16* weight, const bf16* bias, int64_t m,
          int64_t n, int64_t k, cudaStream_t stream);

// The FP8 weight form (model/fp8_projections.h): weight [n, k] E4M3 (OCP e4m3fn) with one f32
// dequantization factor per row and 128 columns, scale [n, ceil(k / 128)];
// out = in @ (weight * scale)^T (+ bias): each 16-value chunk's dot product is scaled by its
// factor and accumulated in f32 (the input stays bf16: no activation quantization). The same
// kernel as gemv, reading 16 values per 16-byte load instead of 8, so a step reads half the
// bytes. Shapes: 1 <= m <= 8, k a positive multiple of 16. CPU twin: dequantize
// (tensor/fp8.h dequantize_fp8_blocks with blocks [1, 128]) then kernels/linear.h `linear`.
// Test: tests/gpu/test_gemv.cpp (gpu_gemv).
bool fp8_gemv_supports(int64_t m, int64_t n, int64_t k);
void fp8_gemv(void* out, GemmOutputType out_type, const bf16* in, const uint8_t* weight, const float* scale,
              const bf16* bias, int64_t m, int64_t n, int64_t k, cudaStream_t stream);

// The gate_up product with SwiGLU as its epilogue: weight [n, k] holds the n / 2 gate rows then
// the n / 2 up rows (gate_up_proj's layout), bias [n] likewise or nullptr, and
// out[m, n / 2] = silu(gate) * up, gate and up being the product's bf16 outputs: bit for bit
// gemv (or fp8_gemv) into [m, n] followed by silu_and_mul (kernels/cuda/activation.h), one launch
// and one [m, n] round trip fewer. Shapes: those of gemv (fp8_gemv) with n a multiple of 16 (the
// activations' rows a multiple of 8, as silu_and_mul's). Test: tests/gpu/test_gemv.cpp
// (GemvSilu.*), tests/gpu/test_fp8_kernels.cpp (Fp8GemvSilu.*).
bool gemv_silu_supports(int64_t m, int64_t n, int64_t k);
bool fp8_gemv_silu_supports(int64_t m, int64_t n, int64_t k);
void gemv_silu(bf16* out, const bf16* in, const bf16* weight, const bf16* bias, int64_t m, int64_t n, int64_t k,
               cudaStream_t stream);
void fp8_gemv_silu(bf16* out, const bf16* in, const uint8_t* weight, const float* scale, const bf16* bias, int64_t m,
                   int64_t n, int64_t k, cudaStream_t stream);

}  // namespace tachyon::kernels::cuda
