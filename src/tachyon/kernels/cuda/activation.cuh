// The SwiGLU gate of one element, shared by silu_and_mul and the GEMV epilogues that apply it
// (moe_gemv.cu), so a fused product and the two-kernel path round the same way bit for bit:
// both take gate and up as bf16 values (the product's outputs rounded once) and compute in f32.
#pragma once

namespace tachyon::kernels::cuda {

// silu(g) * u = g / (1 + e^-g) * u; e^-g overflows to inf for g < -88, giving -0, the right limit.
__device__ __forceinline__ float silu_mul(float gate, float up) { return gate / (1.0f + __expf(-gate)) * up; }

}  // namespace tachyon::kernels::cuda
