#include "tachyon/tensor/cuda/device_buffer.h"

#include <utility>

#include "tachyon/kernels/cuda/cuda_check.h"

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

bool cuda_device_available() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

}  // namespace tachyon::cuda
