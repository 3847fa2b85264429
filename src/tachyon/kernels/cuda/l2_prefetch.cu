// L2 prefetch: see l2_prefetch.h. Bulk requests go to the multiprocessors' copy engines (TMA),
// 32 KB each, one per thread, so a 16 MB range is 512 requests from 16 warps; the line variant
// issues one prefetch instruction per 128 bytes from every thread of a wider grid.
#include "tachyon/kernels/cuda/l2_prefetch.h"

#include <algorithm>
#include <cstdint>

namespace tachyon::kernels::cuda {
namespace {

constexpr uint32_t kPiece = 32 * 1024;  // bytes per bulk request
constexpr int kLine = 128;

__global__ void l2_prefetch_bulk_kernel(const char* data, size_t bytes) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x * kPiece;
  for (size_t at = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kPiece; at < bytes; at += stride) {
    const uint32_t size = static_cast<uint32_t>(std::min<size_t>(kPiece, bytes - at));
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(data + at), "r"(size) : "memory");
  }
}

__global__ void l2_prefetch_lines_kernel(const char* data, size_t bytes) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x * kLine;
  for (size_t at = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kLine; at < bytes; at += stride) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(data + at) : "memory");
  }
}

}  // namespace

void l2_prefetch(const void* data, size_t bytes, cudaStream_t stream, bool lines) {
  bytes -= bytes % 16;
  if (bytes == 0) return;
  TACHYON_CHECK(reinterpret_cast<uintptr_t>(data) % 16 == 0)
      << "l2_prefetch: data (" << data << ") must be 16-byte aligned";
  const char* bytes_at = static_cast<const char*>(data);
  if (lines) {
    const size_t threads = (bytes + kLine - 1) / kLine;
    const unsigned blocks = static_cast<unsigned>(std::min<size_t>((threads + 255) / 256, 264));
    l2_prefetch_lines_kernel<<<blocks, 256, 0, stream>>>(bytes_at, bytes);
  } else {
    const size_t pieces = (bytes + kPiece - 1) / kPiece;
    const unsigned blocks = static_cast<unsigned>(std::min<size_t>((pieces + 31) / 32, 132));
    l2_prefetch_bulk_kernel<<<blocks, 32, 0, stream>>>(bytes_at, bytes);
  }
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
