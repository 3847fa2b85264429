// What the weight-streaming kernels share: gemv.cu (one weight, m <= 8 rows) and moe_gemv.cu
// (each active expert's weight, up to 8 pairs). A block is 4 warps; a warp owns R weight rows
// (2 for m <= 3, 4 for m >= 4, so the m input chunks each lane reads are reused R times) and
// keeps R * U = 8 16-byte streaming loads in flight per lane; k is split across a block's warps
// while the grid has fewer than kTargetWarpsPerSm warps per SM.
#pragma once

#include <cstdint>

#include "tachyon/kernels/cuda/bf16_vec.cuh"

namespace tachyon::kernels::cuda::gemv_detail {

constexpr int kWarps = 4;  // per block
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = kBf16PerVec;    // bf16 per 16-byte load
constexpr int kTargetWarpsPerSm = 16;  // below this, split k across the warps of a block

template <int M>
constexpr int rows_per_warp() {
  return M <= 3 ? 2 : 4;
}
template <int M>
constexpr int unroll() {  // 16-byte chunks per row and lane per loop trip
  return M <= 3 ? 4 : 2;
}

// A weight chunk read once: no L1 allocation (weights must not evict the inputs from L1), L2
// fetches 256 bytes (the warp's neighbours).
__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

}  // namespace tachyon::kernels::cuda::gemv_detail
