// The E4M3 codec on the GPU, shared by the FP8 KV cache's store (rope_store_kv), the attention
// kernels that read it, the FP8 projections' row quantizer and dequantizer (fp8.cu) and the
// kernels that stream E4M3 weights (gemv_common.cuh, moe_gemm.cu). The KV
// cache holds one f32 factor per token and KV head: amax / 448 (1 for an all-zero row), each code
// RNE(x / factor) saturated at +-448, exactly as the CPU reference's fp8_block_round_trip
// (tensor/fp8.h) rounds a row.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "tachyon/kernels/cuda/bf16_vec.cuh"

namespace tachyon::kernels::cuda {

constexpr float kFp8E4m3MaxValue = 448.0f;

__device__ __forceinline__ float fp8_kv_factor(float amax) { return amax > 0.0f ? amax / kFp8E4m3MaxValue : 1.0f; }

// Four values -> four E4M3 codes in one word (value i in byte i).
__device__ __forceinline__ uint32_t fp8_encode4(const float* v, float factor) {
  uint32_t word = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t code = __nv_cvt_float_to_fp8(__fdiv_rn(v[i], factor), __NV_SATFINITE, __NV_E4M3);
    word |= (code & 0xffu) << (8 * i);
  }
  return word;
}

// The two E4M3 codes in bits 16h..16h+15 of `word` (the lower byte first) as f32, exactly,
// through the hardware's fp8x2 -> f16x2 conversion.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t word, int h) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(word >> (16 * h)), __NV_E4M3);
  return __half22float2(__half2(raw));
}

// Eight E4M3 codes (byte i = value i) times `factor` -> eight bf16, rounded to nearest even.
__device__ __forceinline__ uint4 fp8x8_to_bf16x8(uint2 bits, float factor) {
  const uint32_t words[2] = {bits.x, bits.y};
  float v[kBf16PerVec];
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 pair = e4m3x2_to_float2(words[w], h);
      v[4 * w + 2 * h] = pair.x * factor;
      v[4 * w + 2 * h + 1] = pair.y * factor;
    }
  }
  return pack8(v);
}

// Four E4M3 codes (byte i = value i) -> two registers of two f16 each, exactly (every E4M3 value
// is an f16 value), one hardware conversion per register: bytes 0 and 1 in .x (byte 0 in its
// low half), bytes 2 and 3 in .y.
__device__ __forceinline__ uint2 e4m3x4_to_f16x4(uint32_t word) {
  uint2 r;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n"
      " cvt.rn.f16x2.e4m3x2 %1, hi;\n}\n"
      : "=r"(r.x), "=r"(r.y)
      : "r"(word));
  return r;
}

}  // namespace tachyon::kernels::cuda
