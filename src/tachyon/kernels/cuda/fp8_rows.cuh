// The producer side of fp8_rows.h: a thread's eight consecutive values of a row, within a
// 128-column block held by 16 consecutive lanes of one warp (lanes 16j .. 16j + 15, each with 8
// columns), quantized as fp8_quantize_rows quantizes them.
#pragma once

#include <cstdint>

#include "tachyon/kernels/cuda/bf16_vec.cuh"
#include "tachyon/kernels/cuda/fp8_kv.cuh"
#include "tachyon/kernels/cuda/fp8_rows.h"
#include "tachyon/kernels/cuda/row_block.cuh"

namespace tachyon::kernels::cuda {

// A thread's eight values of row `row` (its 8-column vector `vec`) encoded with `factor`.
__device__ __forceinline__ void store_fp8_codes8(const Fp8Rows& q, int64_t row, int64_t row_vecs, int64_t vec,
                                                 const float (&v)[8], float factor) {
  const uint2 codes = {fp8_encode4(v, factor), fp8_encode4(v + 4, factor)};
  reinterpret_cast<uint2*>(q.values)[row * row_vecs + vec] = codes;
}

// Every lane of the warp calls this (the amax is exchanged with shuffles); `active` lanes hold
// values of the row (an inactive lane's group of 16 is wholly inactive: the row's width is a
// multiple of 128). `v` are the values as the bf16 output holds them (already rounded to bf16);
// `vec` is the thread's 8-column vector index in the row.
__device__ __forceinline__ void store_fp8_vec8(const Fp8Rows& q, int64_t row, int64_t row_vecs, int64_t vec,
                                               const float (&v)[8], bool active) {
  float amax = 0.0f;
  if (active) {
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int offset = 8; offset > 0; offset /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
  if (!active) return;
  const float factor = fp8_kv_factor(amax);
  if (vec % 16 == 0) q.scale[(vec / 16) * q.padded_rows + row] = factor;
  store_fp8_codes8(q, row, row_vecs, vec, v, factor);
}

// The per-token form (q.per_token) of a one-block-per-row producer (row_block.cuh): every thread
// of the block calls this with the bf16 vectors it holds (`y`, vector threadIdx.x + k * blockDim.x
// of the row) and the amax of those it holds; the block's amax gives the row's factor.
template <int kVecs>
__device__ inline void store_fp8_row_per_token(const Fp8Rows& q, int64_t row, int vecs, const uint4 (&y)[kVecs],
                                               float amax) {
  const float factor = fp8_kv_factor(block_max(amax));  // 1 for a zero (padding) row
  if (threadIdx.x == 0) q.scale[row] = factor;
#pragma unroll
  for (int k = 0; k < kVecs; ++k) {
    const int vec = threadIdx.x + k * blockDim.x;
    if (vec >= vecs) continue;
    float v[kBf16PerVec];
    unpack8(y[k], v);
    store_fp8_codes8(q, row, vecs, vec, v, factor);
  }
}

}  // namespace tachyon::kernels::cuda
