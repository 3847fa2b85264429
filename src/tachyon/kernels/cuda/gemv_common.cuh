// What the weight-streaming kernels share: gemv.cu (one weight, m <= 8 rows) and moe_gemv.cu
// (each active expert's weight, up to 8 pairs), and the weight formats both stream (bf16, E4M3).
// A block is 4 warps; a warp owns R weight rows (2 for m <= 3, 4 for m >= 4, so the m input
// chunks each lane reads are reused R times) and keeps R * U = 8 16-byte streaming loads in
// flight per lane; k is split across a block's warps while the grid has fewer than
// kTargetWarpsPerSm warps per SM.
#pragma once

#include <cstdint>

#include "tachyon/kernels/cuda/bf16_vec.cuh"
#include "tachyon/kernels/cuda/fp8_kv.cuh"

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

// The weight formats the kernels stream. A 16-byte weight chunk holds 8 bf16 or 16 E4M3 values;
// FP8 rows carry one f32 factor per 128 columns (8 chunks), applied to each chunk's partial dot.
struct Bf16Weights {
  static constexpr int kValues = kChunk;
  const float* scale = nullptr;  // unused
};
struct Fp8Weights {
  static constexpr int kValues = 16;
  static constexpr int kChunksPerScale = 128 / kValues;
  const float* scale = nullptr;  // [n, scale_cols]
};

// 16 E4M3 values (byte i = element i) to f32.
__device__ __forceinline__ void unpack16_fp8(const uint4& bits, float (&v)[16]) {
  const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 pair = e4m3x2_to_float2(words[i], h);
      v[4 * i + 2 * h] = pair.x;
      v[4 * i + 2 * h + 1] = pair.y;
    }
  }
}

// acc[r] += dot(16 input values, weight row r's E4M3 chunk wf[r]) * its factor s[r]: the input is
// the two bf16 chunks at x (an E4M3 chunk covers two). The dot sums in element order, then scales.
template <int R>
__device__ __forceinline__ void add_fp8_chunk(float (&acc)[R], const float (&wf)[R][16], const float (&s)[R],
                                              const uint4* x) {
  float xf[16];
  unpack8(__ldg(x), reinterpret_cast<float(&)[8]>(xf[0]));
  unpack8(__ldg(x + 1), reinterpret_cast<float(&)[8]>(xf[8]));
#pragma unroll
  for (int r = 0; r < R; ++r) {
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) dot = fmaf(xf[i], wf[r][i], dot);
    acc[r] = fmaf(dot, s[r], acc[r]);
  }
}

// The factor of the chunk at `chunk` of the row whose factors start at `scale_row`: loaded with the
// weight chunk itself, so it is in flight together with it (a factor loaded in accumulate would
// stall each chunk on a second memory round trip). bf16 weights have none.
__device__ __forceinline__ float load_factor(const Bf16Weights&, int64_t, int) { return 1.0f; }
__device__ __forceinline__ float load_factor(const Fp8Weights& format, int64_t scale_row, int chunk) {
  return __ldg(format.scale + scale_row + chunk / Fp8Weights::kChunksPerScale);
}

}  // namespace tachyon::kernels::cuda::gemv_detail
