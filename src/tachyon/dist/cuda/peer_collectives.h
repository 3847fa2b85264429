// The kernels of the peer-memory collectives (peer_collectives.cu) as the host sees them: the
// table of every rank's buffers that a kernel reads through peer pointers, and one launcher per
// collective. PeerCommunicator (peer_communicator.h) is the only caller; it picks the path and
// cuts messages into chunks (dist/peer_plan.h), a launcher runs one chunk.
//
// Each launch is ONE kernel on the caller's stream and holds the whole protocol (copy in, cross-
// rank barriers, reduce or gather, closing barrier), so it is CUDA-graph capturable: it needs no
// host work between its steps, and its barrier epochs live in device memory (see the .cu).
// Tests: tests/gpu/test_peer_communicator.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tachyon/dist/communicator.h"
#include "tachyon/dist/peer_plan.h"

namespace tachyon::dist {

inline constexpr int kPeerMaxRanks = 8;    // ranks of one PeerWorld
inline constexpr int kPeerMaxBlocks = 16;  // blocks of one launch, per rank
inline constexpr int kPeerThreads = 512;   // threads per block
// uint32_t words of a rank's sync region: flags, then counters, each [kPeerMaxBlocks][kPeerMaxRanks].
inline constexpr size_t kPeerSyncWords = size_t{2} * kPeerMaxBlocks * kPeerMaxRanks;

// Every rank's buffers, as pointers valid on every rank's device (peer access is on between
// every pair of distinct devices; ranks that share a device need none). Passed by value to
// every kernel; the same for every rank of the world.
struct PeerDeviceView {
  int ranks = 0;                        // ranks of the world, at most kPeerMaxRanks
  int max_blocks = 1;                   // blocks one launch may use, at most kPeerMaxBlocks (co-residency, see the .cu)
  size_t capacity = 0;                  // bytes of each data buffer, a multiple of kPeerUnitBytes
  std::byte* data[kPeerMaxRanks] = {};  // [capacity] bytes on rank r's device: staging and results
  // [kPeerMaxBlocks][kPeerMaxRanks] on rank r's device: flags[r][b][p] is written by rank p's
  // block b when it reaches a barrier (the barrier's epoch), and read only by rank r.
  uint32_t* flags[kPeerMaxRanks] = {};
  // [kPeerMaxBlocks][kPeerMaxRanks] on rank r's device: counters[r][b][p] is the epoch rank r's
  // block b last used toward peer p, read and written only by that block's thread p.
  uint32_t* counters[kPeerMaxRanks] = {};
  uint64_t hang_timeout_ns = 0;  // a barrier wait longer than this traps the kernel; 0: wait forever
};

// All-reduce (sum) of one chunk of `bytes` bytes (a whole number of `type` elements; type is
// kF32, kBF16 or kF16) along `path` (kOneShot or kTwoShot). send and recv are this rank's
// [bytes] device buffers, equal for in place; any alignment (misaligned ones take a slow byte
// path). bytes must be in (0, view.capacity].
void launch_peer_all_reduce(const PeerDeviceView& view, int rank, PeerPath path, ReduceType type, const void* send,
                            void* recv, size_t bytes, cudaStream_t stream);

// All-gather of one chunk: send [bytes] from this rank; rank r's bytes land at
// recv + r * recv_stride (recv_stride >= bytes: the full per-rank size when the message is cut
// into chunks). In place when send == recv + rank * recv_stride. bytes in (0, view.capacity].
void launch_peer_all_gather(const PeerDeviceView& view, int rank, const void* send, void* recv, size_t bytes,
                            size_t recv_stride, cudaStream_t stream);

}  // namespace tachyon::dist
