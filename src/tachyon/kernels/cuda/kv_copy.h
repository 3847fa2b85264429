// Copies KV rows between two paged caches token by token: prefill/decode disaggregation by
// reference (runner/cuda/cuda_kv_rows.h), where a decode server copies a prompt's rows straight
// out of a prefill server's cache on the same GPU (mapped through CUDA IPC) into its own blocks.
// The two caches may page differently (block sizes differ), so each token's source and
// destination slots come from the two block tables. A bit copy: no dtype is interpreted.
// Test: tests/gpu/test_kv_copy.cpp (against a host loop, the destination poisoned first).
#pragma once

#include <cstddef>
#include <cstdint>

#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::kernels::cuda {

// One cache plane (a layer's K, V, latent or index keys): slot s's row starts at
// base + s * row_bytes in either cache.
struct KvCopyPlane {
  const std::byte* src;
  std::byte* dst;
  int64_t row_bytes;  // a multiple of 16, and both bases 16-byte aligned (checked on the host)
};

// For every plane p and token t < num_tokens: the row of slot
// src_blocks[t / src_block_size] * src_block_size + t % src_block_size in planes[p].src goes to
// slot dst_blocks[t / dst_block_size] * dst_block_size + t % dst_block_size in planes[p].dst.
// `planes`, `src_blocks` and `dst_blocks` are device arrays; `host_planes` is the same plane list
// on the host, for the checks. num_tokens == 0 launches nothing.
void copy_kv_rows(const KvCopyPlane* planes, const KvCopyPlane* host_planes, int32_t num_planes,
                  const int32_t* src_blocks, int32_t src_block_size, const int32_t* dst_blocks,
                  int32_t dst_block_size, int64_t num_tokens, cudaStream_t stream);

}  // namespace tachyon::kernels::cuda
