// Shared helpers of the GPU tests: fresh random inputs (a new seed every run, printed so a
// failure can be replayed with TACHYON_TEST_SEED=<seed>), device arrays that are poisoned
// (every byte 0xFF: NaN in bf16 and f32) before a kernel writes them, and the relative error
// ||out - ref|| / ||ref|| that METHOD.md's tolerances are stated in.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tachyon/base/check.h"
#include "tachyon/tensor/cuda/cuda_check.h"
#include "tachyon/tensor/cuda/device_buffer.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::gpu_test {

using kernels::cuda::bf16;

// bf16 operands land between 1e-3 and 1e-2 (METHOD.md); our kernels round once per stage.
inline constexpr double kBf16Tolerance = 1e-2;

inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    const char* fixed = std::getenv("TACHYON_TEST_SEED");
    const uint64_t value = fixed != nullptr ? std::strtoull(fixed, nullptr, 10) : std::random_device{}();
    std::printf("[gpu_test] TACHYON_TEST_SEED=%llu\n", static_cast<unsigned long long>(value));
    return value;
  }();
  return seed;
}

// A generator per test, seeded from the run's seed and a test-chosen salt.
inline std::mt19937_64 rng(uint64_t salt) { return std::mt19937_64(test_seed() * 0x9E3779B97F4A7C15ull + salt); }

// Normal(0, scale) values, in chunks of 2^20 filled on every core, each chunk from its own
// generator seeded from `gen` in order, so a seed replays the same values whatever the core count.
// (A long-context paged cache is hundreds of millions of values, 23 ns each on one core: the
// decode attention tests spent about 100 s drawing them.)
inline std::vector<float> random_floats(std::mt19937_64& gen, size_t count, float scale = 1.0f) {
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<float> values(count);
  std::vector<uint64_t> seeds((count + kChunk - 1) / kChunk);
  for (uint64_t& seed : seeds) seed = gen();
  const auto fill = [&](size_t first, size_t stride) {
    for (size_t c = first; c < seeds.size(); c += stride) {
      std::mt19937_64 chunk_gen(seeds[c]);
      std::normal_distribution<float> dist(0.0f, scale);
      const size_t end = std::min(count, (c + 1) * kChunk);
      for (size_t i = c * kChunk; i < end; ++i) values[i] = dist(chunk_gen);
    }
  };
  const size_t threads = std::min<size_t>(seeds.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> helpers;
  for (size_t t = 1; t < threads; ++t) helpers.emplace_back(fill, t, threads);
  fill(0, std::max<size_t>(threads, 1));
  for (std::thread& helper : helpers) helper.join();
  return values;
}

// Values already representable in bf16, so the CPU reference and the GPU see the same inputs.
inline std::vector<float> round_to_bf16(std::vector<float> values) {
  for (float& v : values) v = bf16_to_f32(f32_to_bf16(v));
  return values;
}

inline std::vector<float> random_bf16_values(std::mt19937_64& gen, size_t count, float scale = 1.0f) {
  return round_to_bf16(random_floats(gen, count, scale));
}

// A device array of T with host round trips. T is bf16, float or an integer type.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count), buffer_(count * sizeof(T)) { poison(); }
  T* data() const { return buffer_.as<T>(); }
  size_t size() const { return count_; }
  void poison() { TACHYON_CUDA_CHECK(cudaMemset(buffer_.data(), 0xFF, count_ * sizeof(T))); }
  void upload(const std::vector<T>& host) {
    TACHYON_CHECK(host.size() == count_) << host.size() << " != " << count_;
    TACHYON_CUDA_CHECK(cudaMemcpy(buffer_.data(), host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> host(count_);
    TACHYON_CUDA_CHECK(cudaMemcpy(host.data(), buffer_.data(), count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }

 private:
  size_t count_;
  cuda::DeviceBuffer buffer_;
};

// f32 values -> a bf16 device array (values should be bf16-representable, see round_to_bf16).
inline DeviceArray<bf16> upload_bf16(const std::vector<float>& values) {
  std::vector<bf16> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = __float2bfloat16(values[i]);
  DeviceArray<bf16> array(values.size());
  array.upload(bits);
  return array;
}

inline std::vector<float> download_f32(const DeviceArray<bf16>& array) {
  std::vector<bf16> bits = array.download();
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) values[i] = __bfloat162float(bits[i]);
  return values;
}

template <typename T>
inline DeviceArray<T> upload(const std::vector<T>& values) {
  DeviceArray<T> array(values.size());
  array.upload(values);
  return array;
}

// ||out - ref|| / ||ref||; infinite when out holds a NaN or Inf (an unwritten, poisoned element).
inline double relative_error(const std::vector<float>& out, const std::vector<float>& ref) {
  EXPECT_EQ(out.size(), ref.size());
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < out.size() && i < ref.size(); ++i) {
    if (!std::isfinite(out[i])) return INFINITY;
    diff += (double(out[i]) - ref[i]) * (double(out[i]) - ref[i]);
    norm += double(ref[i]) * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

// The message of the tachyon::Error `call` throws, or "" when it throws none: argument-check
// tests assert on what the user would read.
inline std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// A stream of the test's own (blocking: it orders with the legacy default stream, as the tests'
// synchronous copies expect), destroyed with the test.
struct Stream {
  cudaStream_t stream = nullptr;
  Stream() { TACHYON_CUDA_CHECK(cudaStreamCreate(&stream)); }
  ~Stream() { cudaStreamDestroy(stream); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

}  // namespace tachyon::gpu_test
