// Small CUDA host helpers the communicators share: a scope guard for the calling thread's
// current device, and the opaque `void* stream` of dist::Communicator back as a cudaStream_t.
#pragma once

#include <cuda_runtime_api.h>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::cuda {

// Restores the calling thread's current device on scope exit.
class DeviceGuard {
 public:
  DeviceGuard() { TACHYON_CUDA_CHECK(cudaGetDevice(&saved_)); }
  ~DeviceGuard() { cudaSetDevice(saved_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int saved_ = 0;
};

inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

}  // namespace tachyon::cuda
