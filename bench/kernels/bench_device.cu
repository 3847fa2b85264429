// Random fills and the spin kernel of the kernel benchmarks (bench_device.h).
#include "bench_device.h"

#include <algorithm>

namespace tachyon::bench {
namespace {

using kernels::cuda::bf16;

// splitmix64: a well-mixed 64-bit hash of (seed, index).
__device__ uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__device__ float uniform(uint64_t seed, size_t i, float scale) {
  const uint64_t h = mix(seed * 0x2545F4914F6CDD1Dull + i);
  return (static_cast<float>(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale;  // 24 random bits
}

template <typename T>
__global__ void fill_kernel(T* data, size_t count, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    data[i] = static_cast<T>(uniform(seed, i, scale));
  }
}

template <typename T>
void fill(T* data, size_t count, uint64_t seed, float scale, cudaStream_t stream) {
  if (count == 0) return;
  constexpr int kThreads = 256;
  const size_t blocks = std::min<size_t>((count + kThreads - 1) / kThreads, size_t{1} << 16);
  fill_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(data, count, seed, scale);
  TACHYON_CUDA_CHECK_LAUNCH();
}

__global__ void fill_e4m3_kernel(uint8_t* data, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    const auto code = static_cast<uint8_t>(mix(seed * 0x2545F4914F6CDD1Dull + i) >> 56);
    data[i] = (code & 0x7f) == 0x7f ? code ^ 1 : code;
  }
}

__global__ void spin_kernel(uint64_t nanoseconds) {
  uint64_t start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
}

}  // namespace

void fill_random_bf16(bf16* data, size_t count, uint64_t seed, float scale, cudaStream_t stream) {
  fill(data, count, seed, scale, stream);
}

void fill_random_f32(float* data, size_t count, uint64_t seed, float scale, cudaStream_t stream) {
  fill(data, count, seed, scale, stream);
}

void fill_random_e4m3(uint8_t* data, size_t count, uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  constexpr int kThreads = 256;
  const size_t blocks = std::min<size_t>((count + kThreads - 1) / kThreads, size_t{1} << 16);
  fill_e4m3_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(data, count, seed);
  TACHYON_CUDA_CHECK_LAUNCH();
}

void spin_for_us(double microseconds, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(microseconds * 1e3));
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::bench
