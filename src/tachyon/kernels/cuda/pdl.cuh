// Programmatic dependent launch (Hopper): a kernel launched with launch_pdl may start while the
// kernel before it on the stream is still draining, so its launch, block scheduling and any
// prologue that reads no earlier output (a GEMV's first weight loads) overlap that tail. At a
// decode step of ~300 short kernels the gaps between them are a real share of the time.
//
// The contract every kernel launched this way keeps: pdl_wait() before its first read of
// anything an earlier kernel wrote and before its first global write (it blocks until the
// previous grid has completed and its memory is visible), and pdl_launch_dependents() once it
// is fine for the next kernel to start its own prologue. Launched without the attribute (or
// captured into a graph, which keeps the programmatic edge) both are no-ops or exact.
#pragma once

#include <utility>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" :::); }

template <typename... KernelArgs, typename... Args>
void launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  TACHYON_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace tachyon::kernels::cuda
