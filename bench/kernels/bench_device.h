// Device helpers of the kernel benchmarks: random fills (timing on zeros or constants hides
// wrong indexing and can run faster than real data; the DSA top-k needs distinct scores to pick
// scattered positions as it does in a model) and a spin kernel that keeps the stream busy while
// the host enqueues the timed work, so that host launch latency stays out of the event interval.
#pragma once

#include <cstddef>
#include <cstdint>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::bench {

// data: [count] bf16 / f32, uniform in [-scale, scale) from a hash of (seed, index): finite, never NaN.
void fill_random_bf16(kernels::cuda::bf16* data, size_t count, uint64_t seed, float scale, cudaStream_t stream);
void fill_random_f32(float* data, size_t count, uint64_t seed, float scale, cudaStream_t stream);
// data: [count] E4M3 bytes, each a hash of (seed, index) with the two NaN codes (0x7f, 0xff) moved
// to their neighbours (+-448): every finite code, magnitudes spread over the format's whole range.
void fill_random_e4m3(uint8_t* data, size_t count, uint64_t seed, cudaStream_t stream);

// One thread that returns after `microseconds` of the device's global timer.
void spin_for_us(double microseconds, cudaStream_t stream);

}  // namespace tachyon::bench
