// The KV row copy (kv_copy.h): one thread moves 16 bytes; a thread block copies the rows of
// kTokensPerBlock consecutive tokens of one plane, so a 256-byte row (a head of 128 bf16) keeps
// a block's threads busy and a 16K-token prompt of 64 planes is 2,048 x 64 blocks in one launch.
// Reads and writes are whole rows at 16-byte alignment; the copy is bound by device memory
// bandwidth (each byte is read once and written once).
#include "tachyon/kernels/cuda/kv_copy.h"

#include "tachyon/base/check.h"

namespace tachyon::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kTokensPerBlock = 8;

__global__ void copy_kv_rows_kernel(const KvCopyPlane* __restrict__ planes, const int32_t* __restrict__ src_blocks,
                                    int32_t src_block_size, const int32_t* __restrict__ dst_blocks,
                                    int32_t dst_block_size, int64_t num_tokens) {
  const KvCopyPlane plane = planes[blockIdx.y];
  const int64_t vecs_per_row = plane.row_bytes / 16;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kTokensPerBlock;
  const int64_t tokens = min(static_cast<int64_t>(kTokensPerBlock), num_tokens - first);
  for (int64_t i = threadIdx.x; i < tokens * vecs_per_row; i += kThreads) {
    const int64_t t = first + i / vecs_per_row;
    const int64_t v = i % vecs_per_row;
    const int64_t src_slot = static_cast<int64_t>(src_blocks[t / src_block_size]) * src_block_size + t % src_block_size;
    const int64_t dst_slot = static_cast<int64_t>(dst_blocks[t / dst_block_size]) * dst_block_size + t % dst_block_size;
    const uint4* src = reinterpret_cast<const uint4*>(plane.src + src_slot * plane.row_bytes);
    uint4* dst = reinterpret_cast<uint4*>(plane.dst + dst_slot * plane.row_bytes);
    dst[v] = src[v];
  }
}

}  // namespace

void copy_kv_rows(const KvCopyPlane* planes, const KvCopyPlane* host_planes, int32_t num_planes,
                  const int32_t* src_blocks, int32_t src_block_size, const int32_t* dst_blocks,
                  int32_t dst_block_size, int64_t num_tokens, cudaStream_t stream) {
  TACHYON_CHECK(num_planes >= 0 && num_planes <= 65535 && src_block_size > 0 && dst_block_size > 0 && num_tokens >= 0)
      << "copy_kv_rows: " << num_planes << " planes, block sizes " << src_block_size << "/" << dst_block_size << ", "
      << num_tokens << " tokens";
  for (int32_t p = 0; p < num_planes; ++p) {
    const KvCopyPlane& plane = host_planes[p];
    TACHYON_CHECK(plane.row_bytes > 0 && plane.row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(plane.src) % 16 == 0 &&
                  reinterpret_cast<uintptr_t>(plane.dst) % 16 == 0)
        << "copy_kv_rows: plane " << p << " has rows of " << plane.row_bytes
        << " bytes or unaligned bases (16-byte rows and alignment needed)";
  }
  if (num_tokens == 0 || num_planes == 0) return;
  const dim3 grid(static_cast<unsigned>((num_tokens + kTokensPerBlock - 1) / kTokensPerBlock),
                  static_cast<unsigned>(num_planes));
  copy_kv_rows_kernel<<<grid, kThreads, 0, stream>>>(planes, src_blocks, src_block_size, dst_blocks, dst_block_size,
                                                     num_tokens);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::kernels::cuda
