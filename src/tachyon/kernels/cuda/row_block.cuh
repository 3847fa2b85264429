// One block per row, the row held in registers: the shape of the kernels that reduce over a
// whole row before they write it (rms_norm.cu's norms, activation.cu's per-token SwiGLU). Each
// thread holds kVecs 16-byte vectors (a template, so they stay in registers); the block reduces
// with warp shuffles and one shared-memory step across warps.
#pragma once

#include <algorithm>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

constexpr int kRowMaxVecs = 8;       // uint4 registers per thread at most
constexpr int kRowMaxThreads = 512;  // so a row of up to 512 * 8 vectors (32,768 bf16) is served

// Sum of `value` over the block, returned to every thread. blockDim.x is a multiple of 32.
__device__ inline float block_sum(float value) {
  __shared__ float warp_sums[32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_sums[warp] = value;
  __syncthreads();
  const int num_warps = blockDim.x / 32;
  value = lane < num_warps ? warp_sums[lane] : 0.0f;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;  // every warp reduced the same partials, so no second barrier is needed
}

// Largest `value` over the block, returned to every thread (its own shared slots: block_sum's
// may still be read). blockDim.x is a multiple of 32.
__device__ inline float block_max(float value) {
  __shared__ float warp_maxes[32];
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_maxes[warp] = value;
  __syncthreads();
  value = lane < static_cast<int>(blockDim.x / 32) ? warp_maxes[lane] : 0.0f;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// The launch shape of a row of `vecs` vectors: the fewest vectors per thread (a power of two)
// that fit kRowMaxThreads threads, and the threads (whole warps) that then cover the row.
struct RowLaunch {
  int vecs_per_thread;
  int threads;
};

inline RowLaunch row_launch(int vecs) {
  int per_thread = 1;
  while (per_thread * kRowMaxThreads < vecs) per_thread *= 2;
  const int threads = (vecs + per_thread - 1) / per_thread;
  return {per_thread, std::max(32, (threads + 31) / 32 * 32)};
}

// Calls f.template operator()<kVecs>() with row_launch's vecs_per_thread as a constant: the one
// place that maps its powers of two (1, 2, 4, kRowMaxVecs) to kernel instances.
template <typename F>
void with_row_vecs(int vecs_per_thread, F&& f) {
  switch (vecs_per_thread) {
    case 1: f.template operator()<1>(); break;
    case 2: f.template operator()<2>(); break;
    case 4: f.template operator()<4>(); break;
    default: f.template operator()<kRowMaxVecs>(); break;
  }
}

}  // namespace tachyon::kernels::cuda
