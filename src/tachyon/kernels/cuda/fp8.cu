// One thread per 8 weights: an 8-byte FP8 load, the row's factor, one 16-byte bf16 store (8-value
// chunks, so any k that is a multiple of 8 works, as for the bf16 products).
#include "tachyon/kernels/cuda/fp8.h"

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "tachyon/kernels/cuda/bf16_vec.cuh"

namespace tachyon::kernels::cuda {
namespace {

__global__ void fp8_dequantize_kernel(uint4* __restrict__ out, const uint2* __restrict__ weight,
                                      const float* __restrict__ scale, int64_t chunks, int64_t chunks_per_row,
                                      int64_t scale_cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= chunks) return;
  const int64_t row = i / chunks_per_row, c = i % chunks_per_row;
  const float s = __ldg(scale + row * scale_cols + c / 16);  // 16 chunks of 8 per 128 columns
  const uint2 bits = __ldg(weight + i);
  const uint32_t words[2] = {bits.x, bits.y};
  float v[8];
#pragma unroll
  for (int w = 0; w < 2; ++w) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(words[w] >> (16 * h)),
                                                         __NV_E4M3);
      const float2 pair = __half22float2(__half2(raw));
      v[4 * w + 2 * h] = pair.x * s;
      v[4 * w + 2 * h + 1] = pair.y * s;
    }
  }
  out[i] = pack8(v);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void fp8_dequantize(bf16* out, const uint8_t* weight, const float* scale, int64_t n, int64_t k, cudaStream_t stream) {
  TACHYON_CHECK(n >= 0 && k > 0 && k % 8 == 0) << "fp8_dequantize: [" << n << ", " << k
                                               << "] (k must be a positive multiple of 8)";
  TACHYON_CHECK(aligned16(out) && reinterpret_cast<uintptr_t>(weight) % 8 == 0)
      << "fp8_dequantize: out must be 16-byte and weight 8-byte aligned";
  const int64_t chunks = n * (k / 8);
  if (chunks == 0) return;
  constexpr int kThreads = 256;
  fp8_dequantize_kernel<<<static_cast<unsigned>((chunks + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      reinterpret_cast<uint4*>(out), reinterpret_cast<const uint2*>(weight), scale, chunks, k / 8, (k + 127) / 128);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
