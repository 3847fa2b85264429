// Eight bf16 in one 16-byte word, the unit of every vectorized load and store of the
// memory-bound kernels. Element 2i is the low half of word i, and a bf16 is the top half of an
// f32, so unpacking is a shift or a mask; reading the words (not a bf16 view) keeps the loads
// 16 bytes wide.
#pragma once

#include <cstdint>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

constexpr int kBf16PerVec = 8;  // bf16 per uint4

__device__ __forceinline__ void unpack8(const uint4& bits, float (&v)[kBf16PerVec]) {
  const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(words[i] << 16);
    v[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

// Rounds to nearest even, as torch casts f32 -> bf16.
__device__ __forceinline__ uint4 pack8(const float (&v)[kBf16PerVec]) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
    words[i] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

}  // namespace tachyon::kernels::cuda
