// Decode context parallelism (DCP, --decode-context-parallel-size N): which rank of a DCP group
// holds which token of a sequence's latent KV cache. Tokens are dealt out in runs of `interleave`
// (--dcp-kv-cache-interleave-size, default 1, vLLM's name): global position p lives on rank
// (p / interleave) % N, as the local token (p / (interleave * N)) * interleave + p % interleave
// of that rank's own sequence. So each rank holds ~1/N of every sequence, which is why DCP exists:
// under TP the latent row is every head's key and value and each TP rank would otherwise cache all
// of it (docs/parallelism.md).
//
// The one non-obvious decision: a rank's cache is an ordinary paged cache of block size B / N
// indexed by the ENGINE's block table. The engine plans blocks of B global tokens; when
// interleave * N divides B, global block b's local tokens on every rank are exactly local block b
// (B / N of them), so the ranks share the engine's block table, prefix-cache hits and
// preemptions with no plan of their own, and each rank's cache holds num_blocks * B / N rows
// instead of num_blocks * B: the capacity gain.
// Plain data with no dependencies, so the CPU ranks (model/, runner/) and the CUDA kernels
// (kernels/cuda/mla_attention.h, dsa_indexer.h, dcp_attention.h) read the one map.
// Tests: tests/unit/test_dcp_merge.cpp (the map), test_dcp_families.cpp (capacity),
// tests/gpu/test_dcp_kernels.cpp (the kernels' use of it).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TACHYON_HOST_DEVICE __host__ __device__
#else
#define TACHYON_HOST_DEVICE
#endif

namespace tachyon::kernels {

struct DcpLayout {
  int size = 1;        // ranks of the DCP group (N); 1: this rank holds every token
  int rank = 0;        // this rank's index in it
  int interleave = 1;  // tokens per run

  // The rank that holds global position p.
  TACHYON_HOST_DEVICE int owner(int64_t position) const { return static_cast<int>((position / interleave) % size); }
  TACHYON_HOST_DEVICE bool owns(int64_t position) const { return owner(position) == rank; }
  // p's index in its owner's local token sequence.
  TACHYON_HOST_DEVICE int64_t local_index(int64_t position) const {
    return position / (static_cast<int64_t>(interleave) * size) * interleave + position % interleave;
  }
  // How many of positions [0, length) this rank holds: the local tokens a query at position
  // length - 1 may attend (causal by GLOBAL position, so speculative verify rows mask correctly).
  TACHYON_HOST_DEVICE int64_t local_count(int64_t length) const {
    const int64_t cycle = static_cast<int64_t>(interleave) * size;
    const int64_t rest = length % cycle - static_cast<int64_t>(rank) * interleave;
    return length / cycle * interleave + (rest < 0 ? 0 : rest > interleave ? interleave : rest);
  }
  // The global position of this rank's local token k (inverse of local_index).
  TACHYON_HOST_DEVICE int64_t global_position(int64_t local) const {
    return (local / interleave * size + rank) * static_cast<int64_t>(interleave) + local % interleave;
  }
  // The local cache slot of an engine slot (block * block_size + offset), for the owner of that
  // token: the same block id, offset local_index(offset) in a block of block_size / size rows.
  TACHYON_HOST_DEVICE int64_t local_slot(int64_t global_slot, int32_t block_size) const {
    const int64_t block = global_slot / block_size, offset = global_slot % block_size;
    return block * (block_size / size) + local_index(offset);
  }
};

}  // namespace tachyon::kernels
