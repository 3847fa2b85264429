// Owned device and pinned-host allocations. The CUDA runner allocates every buffer it will
// ever use up front (weights, KV cache, workspace, staging) through these, so the step loop
// never calls cudaMalloc (DESIGN.md rule 4). Move-only; freeing happens in the destructor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tachyon::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // cudaMalloc; throws Error naming the size when out of memory
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory: the source of the one H2D copy per step and the target of the D2H.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Free and total device memory of the current device, in bytes.
struct DeviceMemoryInfo {
  size_t free = 0;
  size_t total = 0;
};
DeviceMemoryInfo device_memory_info();

// CUDA devices visible to this process (0 when there is no driver or no GPU).
int cuda_device_count();
// True when a CUDA device is present and usable (the CLI's default device choice).
bool cuda_device_available();

// Device-to-device copy bandwidth in bytes/s (bytes read + bytes written), the median of
// `repeats` timed copies of `bytes` after a warm-up: the memory-bound floor's denominator.
double measure_copy_bandwidth(size_t bytes = size_t{1} << 30, int repeats = 10);

// Streaming multiprocessors of the current device (launch sizing of the kernels); cached per device.
int multiprocessor_count();

// "NVIDIA H200 sm_90": the current device's name and compute capability (cache keys, reports).
std::string current_device_name();

}  // namespace tachyon::cuda
