// fp8_dequantize: one thread per 8 weights: an 8-byte FP8 load, the row's factor, one 16-byte bf16
// store (8-value chunks, so any k that is a multiple of 8 works, as for the bf16 products).
// fp8_quantize_rows: one warp per row and 128 columns, four values per lane; the block's amax by
// shuffles, then each lane writes its four codes as one 4-byte store.
// fp8_quantize_rows_per_token: one block per row; the row's amax over 8-value vectors (a block
// reduction), then a second pass over the same vectors (from L1/L2) writes 8 codes per store.
#include "tachyon/kernels/cuda/fp8.h"

#include "tachyon/kernels/cuda/fp8_kv.cuh"

namespace tachyon::kernels::cuda {
namespace {

__global__ void fp8_dequantize_kernel(uint4* __restrict__ out, const uint2* __restrict__ weight,
                                      const float* __restrict__ scale, int64_t chunks, int64_t chunks_per_row,
                                      int64_t scale_cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= chunks) return;
  const int64_t row = i / chunks_per_row, c = i % chunks_per_row;
  const float s = __ldg(scale + row * scale_cols + c / 16);  // 16 chunks of 8 per 128 columns
  out[i] = fp8x8_to_bf16x8(__ldg(weight + i), s);
}

__global__ void fp8_quantize_rows_kernel(uint32_t* __restrict__ out, float* __restrict__ scale,
                                         const uint2* __restrict__ in, int64_t m, int64_t padded_m, int64_t k,
                                         int64_t blocks_per_row) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (warp >= padded_m * blocks_per_row) return;  // whole warps leave together
  const int64_t row = warp / blocks_per_row, block = warp % blocks_per_row;
  const int64_t column = block * 128 + lane * 4;
  const bool active = column < k;  // k is a multiple of 16: a lane has all four values or none
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // a padding row stays zero: factor 1, codes 0
  if (active && row < m) {
    const uint2 bits = __ldg(in + (row * k + column) / 4);
    v[0] = __uint_as_float(bits.x << 16), v[1] = __uint_as_float(bits.x & 0xFFFF0000u);
    v[2] = __uint_as_float(bits.y << 16), v[3] = __uint_as_float(bits.y & 0xFFFF0000u);
  }
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  // The CPU's quantize_fp8_blocks: the same factor, an IEEE division, RNE with saturation (the
  // KV cache's codec, fp8_kv.cuh).
  const float factor = fp8_kv_factor(amax);
  if (lane == 0) scale[block * padded_m + row] = factor;
  if (!active) return;
  out[(row * k + column) / 4] = fp8_encode4(v, factor);
}

constexpr int kPerTokenThreads = 256;

__global__ void fp8_quantize_rows_per_token_kernel(uint2* __restrict__ out, float* __restrict__ scale,
                                                   const uint4* __restrict__ in, int64_t m, int64_t vecs_per_row) {
  __shared__ float warp_amax[kPerTokenThreads / 32];
  const int64_t row = blockIdx.x;
  const bool real = row < m;  // rows past m: zero codes, factor 1
  float amax = 0.0f;
  if (real) {
    for (int64_t v = threadIdx.x; v < vecs_per_row; v += blockDim.x) {
      float x[8];
      unpack8(__ldg(in + row * vecs_per_row + v), x);
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.0f;
#pragma unroll
  for (int w = 0; w < kPerTokenThreads / 32; ++w) amax = fmaxf(amax, warp_amax[w]);
  const float factor = fp8_kv_factor(amax);  // the CPU's quantize_fp8_blocks(in, m, k, 1, k)
  if (threadIdx.x == 0) scale[row] = factor;
  for (int64_t v = threadIdx.x; v < vecs_per_row; v += blockDim.x) {
    float x[8] = {};
    if (real) unpack8(__ldg(in + row * vecs_per_row + v), x);
    out[row * vecs_per_row + v] = uint2{fp8_encode4(x, factor), fp8_encode4(x + 4, factor)};
  }
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

void fp8_quantize_rows(uint8_t* out, float* scale, const bf16* in, int64_t m, int64_t padded_m, int64_t k,
                       cudaStream_t stream) {
  TACHYON_CHECK(m >= 0 && padded_m >= m && k > 0 && k % 16 == 0)
      << "fp8_quantize_rows: [" << m << ", " << k << "] padded to " << padded_m
      << " rows (k must be a positive multiple of 16, padded_m at least m)";
  TACHYON_CHECK(aligned16(out) && aligned16(in) && reinterpret_cast<uintptr_t>(scale) % 4 == 0)
      << "fp8_quantize_rows: out and in must be 16-byte aligned";
  const int64_t blocks_per_row = (k + 127) / 128;
  const int64_t threads = padded_m * blocks_per_row * 32;
  if (threads == 0) return;
  constexpr int kThreads = 256;
  fp8_quantize_rows_kernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      reinterpret_cast<uint32_t*>(out), scale, reinterpret_cast<const uint2*>(in), m, padded_m, k, blocks_per_row);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void fp8_quantize_rows_per_token(uint8_t* out, float* scale, const bf16* in, int64_t m, int64_t padded_m, int64_t k,
                                 cudaStream_t stream) {
  TACHYON_CHECK(m >= 0 && padded_m >= m && padded_m <= INT32_MAX && k > 0 && k % 16 == 0)
      << "fp8_quantize_rows_per_token: [" << m << ", " << k << "] padded to " << padded_m
      << " rows (k must be a positive multiple of 16, padded_m at least m)";
  TACHYON_CHECK(aligned16(out) && aligned16(in) && reinterpret_cast<uintptr_t>(scale) % 4 == 0)
      << "fp8_quantize_rows_per_token: out and in must be 16-byte aligned";
  if (padded_m == 0) return;
  fp8_quantize_rows_per_token_kernel<<<static_cast<unsigned>(padded_m), kPerTokenThreads, 0, stream>>>(
      reinterpret_cast<uint2*>(out), scale, reinterpret_cast<const uint4*>(in), m, k / 8);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
