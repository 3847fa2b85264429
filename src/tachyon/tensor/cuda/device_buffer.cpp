#include "tachyon/tensor/cuda/device_buffer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <utility>
#include <vector>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::cuda {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are not blamed
    TACHYON_FAIL() << "cannot allocate " << bytes / (1 << 20) << " MiB on the GPU ("
                   << cudaGetErrorString(status) << "); lower --gpu-memory-utilization, --max-num-seqs or --max-model-len";
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  TACHYON_CUDA_CHECK(cudaHostAlloc(&data_, bytes, cudaHostAllocDefault));
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) cudaFreeHost(data_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceMemoryInfo device_memory_info() {
  DeviceMemoryInfo info;
  TACHYON_CUDA_CHECK(cudaMemGetInfo(&info.free, &info.total));
  return info;
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

bool cuda_device_available() { return cuda_device_count() > 0; }

double measure_copy_bandwidth(size_t bytes, int repeats) {
  DeviceBuffer src(bytes), dst(bytes);
  TACHYON_CUDA_CHECK(cudaMemset(src.data(), 0x3C, bytes));  // not zeros: see the measuring method
  cudaEvent_t start, stop;
  TACHYON_CUDA_CHECK(cudaEventCreate(&start));
  TACHYON_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int i = -2; i < repeats; ++i) {  // two warm-ups
    TACHYON_CUDA_CHECK(cudaEventRecord(start));
    TACHYON_CUDA_CHECK(cudaMemcpy(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice));
    TACHYON_CUDA_CHECK(cudaEventRecord(stop));
    TACHYON_CUDA_CHECK(cudaEventSynchronize(stop));
    float elapsed = 0;
    TACHYON_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
    if (i >= 0) ms.push_back(elapsed);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return 2.0 * static_cast<double>(bytes) / (ms[ms.size() / 2] * 1e-3);
}

int multiprocessor_count() {
  // Asked at every GEMV and decode-attention launch: read from the driver once per device.
  constexpr int kMaxDevices = 64;
  static std::array<std::atomic<int>, kMaxDevices> cached{};
  int device = 0;
  TACHYON_CUDA_CHECK(cudaGetDevice(&device));
  if (device < kMaxDevices) {
    if (const int known = cached[static_cast<size_t>(device)].load(std::memory_order_relaxed); known > 0) return known;
  }
  int count = 0;
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  if (device < kMaxDevices) cached[static_cast<size_t>(device)].store(count, std::memory_order_relaxed);
  return count;
}

std::string current_device_name() {
  int device = 0;
  TACHYON_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp props{};
  TACHYON_CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  return std::string(props.name) + " sm_" + std::to_string(props.major) + std::to_string(props.minor);
}

}  // namespace tachyon::cuda
