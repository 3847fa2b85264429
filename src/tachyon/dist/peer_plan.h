// PeerPlan: how the peer-memory collectives (dist/cuda/peer_communicator.h) serve one message:
// one-shot or two-shot all-reduce, in how many buffer-sized chunks, or not at all (the NCCL
// fallback takes it). Pure host arithmetic on byte counts, no CUDA types, so it is built and
// unit-tested in the CPU build too: tests/unit/test_peer_plan.cpp.
//
// Every rank of a group must reach the same plan for the same call (a rank that took another
// path would wait forever in a peer barrier), so a plan depends only on what all ranks agree on:
// the message size, the group size and the world's buffer size, never on a device property.
//
// The two all-reduce algorithms, per rank, for a message of M bytes over n ranks:
//   one-shot  copy M in, read n * M (every rank sums the whole message),          2 barriers
//   two-shot  copy M in, read M (sum my 1/n slice), read M (gather the slices),  3 barriers
// One-shot moves n/2 times the bytes but has one barrier less: it wins while the message is
// small enough that latency, not bandwidth, sets the time (decode-step all-reduces). For two
// ranks both read the same bytes, so one-shot always wins. The crossovers below are untuned
// starting points in the range other NVLink custom all-reduces use; measure them in bench/.
#pragma once

#include <cstddef>
#include <string_view>

namespace tachyon::dist {

enum class PeerPath { kOneShot, kTwoShot, kFallback };

std::string_view peer_path_name(PeerPath path);  // "one-shot", "two-shot", "fallback"

// Chunks and the kernels' vector loads work in units of 16 bytes, so every chunk after the first
// starts as aligned as the caller's pointer (a chunk's byte offset is a multiple of 16).
inline constexpr size_t kPeerUnitBytes = 16;

// The largest all-reduce message (bytes) that goes one-shot in a group of `ranks`: unlimited for
// 1 and 2 ranks, 512 KiB up to 4 ranks, 256 KiB above.
size_t one_shot_max_bytes(int ranks);

// The bytes of a world buffer that one chunk may fill: buffer_bytes rounded down to 16.
size_t peer_capacity(size_t buffer_bytes);

// The algorithm for one chunk of `bytes` (at most the capacity) of an all-reduce.
PeerPath all_reduce_path(size_t bytes, int ranks);

struct PeerPlan {
  // kOneShot / kTwoShot: the path of the first chunk (a shorter last chunk picks its own with
  // all_reduce_path); kFallback: the whole message goes to the fallback communicator.
  PeerPath path = PeerPath::kFallback;
  size_t chunks = 0;       // kernel launches; 0 for an empty message or a fallback
  size_t chunk_bytes = 0;  // bytes of every chunk but the last (the capacity when chunked)
};

// All-reduce of `bytes` over `ranks` with a world buffer of `buffer_bytes` per rank. A message
// larger than the capacity goes to the fallback when there is one, else it runs in chunks.
PeerPlan plan_all_reduce(size_t bytes, int ranks, size_t buffer_bytes, bool has_fallback);

// All-gather of `bytes` per rank: this rank's bytes must fit the buffer (peers read them from
// there), else fallback or chunks as above. The path is kOneShot (there is one algorithm).
PeerPlan plan_all_gather(size_t bytes, int ranks, size_t buffer_bytes, bool has_fallback);

}  // namespace tachyon::dist
