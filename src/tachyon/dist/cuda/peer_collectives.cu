// Peer-memory all-reduce and all-gather kernels: each launch is the whole collective for one
// chunk, ranks reading each other's buffers through peer pointers (PeerDeviceView).
//
// Barrier. barrier() is a rendezvous of block b of every rank: thread p of the block bumps its
// epoch counter (device memory, counters[me][b][p]), stores the epoch with release semantics at
// system scope into flags[p][b][me] on peer p's device, and spins with acquire loads until
// flags[me][b][p] has reached the same epoch. __syncthreads() before makes the block's writes
// part of what the release publishes; __syncthreads() after lets every thread read what the
// acquire made visible. Because the epoch comes from device memory and the kernel itself bumps
// it, a launch captured in a CUDA graph gets a fresh epoch on every replay, and no host-side
// counter exists. A flag holds the latest epoch its writer reached: a peer can be at most one
// barrier ahead (it cannot pass the next one without us), so "reached" is a wrap-safe
// signed-difference compare (flag - epoch >= 0), never equality.
// Why per block and not a grid-wide barrier: data block b reads was written by block b of its
// owner, because every phase maps units to blocks the same way (grid-stride over the message,
// or over each slice, with the same grid on every rank). So block b only ever waits for block b.
//
// Buffer reuse. Every kernel ends with a barrier: when a rank's kernel has completed, every
// peer's block has stopped reading that rank's buffer, so its next launch (stream-ordered after
// this one, no programmatic dependent launch) may overwrite it. Calls of one rank must therefore
// be ordered on one stream (or streams joined by events).
//
// Co-residency. A block spins until its peers' blocks arrive, so when ranks share a GPU all their
// kernels must be resident at once, or spinning blocks could keep a peer's kernel off the SMs
// forever. PeerWorld caps the grid at view.max_blocks = min(kPeerMaxBlocks, SMs / ranks on
// the GPU), counting one block per SM (the worst case for a 512-thread block); 8 ranks on one
// 132-SM H200 get 16 blocks each. Other kernels can only delay, never starve, the collective
// (they finish). Ranks sharing a GPU also need streams that do not serialize behind each other:
// non-blocking streams, and enough hardware queues (CUDA_DEVICE_MAX_CONNECTIONS >= ranks).
//
// Numbers. Sums run in f32 over ranks 0, 1, ..., n-1 with __fadd_rn (no contraction) and one
// rounding to the output type at the end (round to nearest even): the order and rounding of
// CpuCommunicator, so every rank and the CPU backend hold the same bits (NaN payloads aside).
// Data loads from staging buffers use ld.global.cv: peers write them during the kernel, so
// nothing may come from a stale or non-coherent cache.
// Tests: tests/gpu/test_peer_communicator.cpp.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>

#include "tachyon/dist/cuda/peer_collectives.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::dist {
namespace {

using Unit = uint4;  // kPeerUnitBytes: the vector every load and store moves

__device__ __forceinline__ void store_release_sys(uint32_t* address, uint32_t value) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(address), "r"(value) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* address) {
  uint32_t value;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
}

// The rendezvous of block blockIdx.x of every rank; see the file comment.
__device__ void barrier(const PeerDeviceView& view, int rank) {
  __syncthreads();
  const int peer = threadIdx.x;
  if (peer < view.ranks) {
    const int slot = blockIdx.x * kPeerMaxRanks;
    uint32_t* counter = view.counters[rank] + slot + peer;
    const uint32_t epoch = *counter + 1;
    *counter = epoch;
    store_release_sys(view.flags[peer] + slot + rank, epoch);
    const uint32_t* seen = view.flags[rank] + slot + peer;
    const uint64_t start = view.hang_timeout_ns != 0 ? globaltimer_ns() : 0;
    while (static_cast<int32_t>(load_acquire_sys(seen) - epoch) < 0) {
      if (view.hang_timeout_ns != 0 && globaltimer_ns() - start > view.hang_timeout_ns) {
        printf(
            "tachyon peer collective: rank %d block %d waited over %llu ns for rank %d at epoch %u: the ranks "
            "disagree on the sequence of collectives, or a peer's kernel cannot become resident\n",
            rank, int(blockIdx.x), static_cast<unsigned long long>(view.hang_timeout_ns), peer, epoch);
        __trap();
      }
    }
  }
  __syncthreads();
}

__device__ __forceinline__ bool is_aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % sizeof(Unit) == 0; }

// Unit u (bytes [16u, 16u + 16)) of a [bytes] buffer: one 16-byte load when the buffer is aligned
// and the unit lies inside it, else byte by byte with zeros past the end (the tail, or a caller's
// misaligned pointer).
__device__ __forceinline__ Unit load_unit(const std::byte* src, size_t bytes, size_t u, bool aligned) {
  const size_t offset = u * sizeof(Unit);
  if (aligned && offset + sizeof(Unit) <= bytes) return reinterpret_cast<const Unit*>(src)[u];
  uint32_t words[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    if (offset + i < bytes) words[i / 4] |= uint32_t(static_cast<uint8_t>(src[offset + i])) << (8 * (i % 4));
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// Writes the bytes of `unit` that fall inside a [bytes] buffer at unit u (see load_unit).
__device__ __forceinline__ void store_unit(std::byte* dst, size_t bytes, size_t u, bool aligned, const Unit& unit) {
  const size_t offset = u * sizeof(Unit);
  if (aligned && offset + sizeof(Unit) <= bytes) {
    reinterpret_cast<Unit*>(dst)[u] = unit;
    return;
  }
  const uint32_t words[4] = {unit.x, unit.y, unit.z, unit.w};
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    if (offset + i < bytes) dst[offset + i] = static_cast<std::byte>(words[i / 4] >> (8 * (i % 4)));
  }
}

__device__ __forceinline__ Unit load_staged(const PeerDeviceView& view, int rank, size_t u) {
  return __ldcv(reinterpret_cast<const Unit*>(view.data[rank]) + u);
}

// Elements of a type in one unit: 4 f32, 8 bf16 or f16.
template <ReduceType kType>
constexpr int kLanes = kType == ReduceType::kF32 ? 4 : 8;

// Element 2i of a 16-bit pair is the low half of word i (little endian).
template <ReduceType kType>
__device__ __forceinline__ void unpack(const Unit& unit, float (&out)[kLanes<kType>]) {
  const uint32_t words[4] = {unit.x, unit.y, unit.z, unit.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kType == ReduceType::kF32) {
      out[i] = __uint_as_float(words[i]);
    } else if constexpr (kType == ReduceType::kBF16) {
      out[2 * i] = __uint_as_float(words[i] << 16);
      out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    } else {
      out[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(words[i] & 0xffffu)));
      out[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(words[i] >> 16)));
    }
  }
}

// Rounds to nearest even, as the CPU backend's f32_to_bf16 / f32_to_f16 do.
template <ReduceType kType>
__device__ __forceinline__ Unit pack(const float (&in)[kLanes<kType>]) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kType == ReduceType::kF32) {
      words[i] = __float_as_uint(in[i]);
    } else if constexpr (kType == ReduceType::kBF16) {
      words[i] = uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(in[2 * i]))) |
                 uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(in[2 * i + 1]))) << 16;
    } else {
      words[i] = uint32_t(__half_as_ushort(__float2half_rn(in[2 * i]))) |
                 uint32_t(__half_as_ushort(__float2half_rn(in[2 * i + 1]))) << 16;
    }
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// Unit u summed over every rank's staged buffer in rank order, rounded once (file comment).
// All ranks' loads are issued before the first add, so they are in flight together.
template <ReduceType kType>
__device__ __forceinline__ Unit sum_unit(const PeerDeviceView& view, size_t u) {
  Unit loaded[kPeerMaxRanks];
#pragma unroll
  for (int r = 0; r < kPeerMaxRanks; ++r) {
    if (r < view.ranks) loaded[r] = load_staged(view, r, u);
  }
  float acc[kLanes<kType>], next[kLanes<kType>];
  unpack<kType>(loaded[0], acc);
#pragma unroll
  for (int r = 1; r < kPeerMaxRanks; ++r) {
    if (r < view.ranks) {
      unpack<kType>(loaded[r], next);
#pragma unroll
      for (int i = 0; i < kLanes<kType>; ++i) acc[i] = __fadd_rn(acc[i], next[i]);
    }
  }
  return pack<kType>(acc);
}

__device__ __forceinline__ size_t slice_end(size_t units, size_t begin, size_t per_slice) {
  return begin + per_slice < units ? begin + per_slice : units;
}
__device__ __forceinline__ size_t unit_count(size_t bytes) { return (bytes + sizeof(Unit) - 1) / sizeof(Unit); }
__device__ __forceinline__ size_t first_unit() { return size_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ size_t unit_stride() { return size_t(gridDim.x) * blockDim.x; }

// send, recv: [bytes] of this rank (recv == send in place). Every rank sums the whole message.
template <ReduceType kType>
__global__ void __launch_bounds__(kPeerThreads)
    one_shot_all_reduce_kernel(PeerDeviceView view, int rank, const std::byte* send, std::byte* recv, size_t bytes) {
  const size_t units = unit_count(bytes);
  const bool send_aligned = is_aligned(send), recv_aligned = is_aligned(recv);
  Unit* mine = reinterpret_cast<Unit*>(view.data[rank]);
  for (size_t u = first_unit(); u < units; u += unit_stride()) mine[u] = load_unit(send, bytes, u, send_aligned);
  barrier(view, rank);  // this block's units are staged on every rank
  for (size_t u = first_unit(); u < units; u += unit_stride())
    store_unit(recv, bytes, u, recv_aligned, sum_unit<kType>(view, u));
  barrier(view, rank);  // no peer reads my staged units any more
}

// send, recv: [bytes] of this rank (recv == send in place). Rank s owns slice s of the units;
// within a slice units map to blocks by the same grid stride in every phase, so that block b
// reads only what block b of the owner staged or reduced.
template <ReduceType kType>
__global__ void __launch_bounds__(kPeerThreads)
    two_shot_all_reduce_kernel(PeerDeviceView view, int rank, const std::byte* send, std::byte* recv, size_t bytes) {
  const size_t units = unit_count(bytes);
  const size_t per_slice = (units + view.ranks - 1) / view.ranks;
  const bool send_aligned = is_aligned(send), recv_aligned = is_aligned(recv);
  Unit* mine = reinterpret_cast<Unit*>(view.data[rank]);
  for (int s = 0; s < view.ranks; ++s) {
    const size_t begin = s * per_slice, end = slice_end(units, begin, per_slice);
    for (size_t u = begin + first_unit(); u < end; u += unit_stride())
      mine[u] = load_unit(send, bytes, u, send_aligned);
  }
  barrier(view, rank);
  // Reduce-scatter: my slice, in place over my staged copy of it. Safe: in this phase a rank
  // reads only its own slice of every buffer, so no peer reads mine.
  {
    const size_t begin = rank * per_slice, end = slice_end(units, begin, per_slice);
    for (size_t u = begin + first_unit(); u < end; u += unit_stride()) mine[u] = sum_unit<kType>(view, u);
  }
  barrier(view, rank);  // every slice is reduced in its owner's buffer
  for (int s = 0; s < view.ranks; ++s) {
    const size_t begin = s * per_slice, end = slice_end(units, begin, per_slice);
    for (size_t u = begin + first_unit(); u < end; u += unit_stride())
      store_unit(recv, bytes, u, recv_aligned, load_staged(view, s, u));
  }
  barrier(view, rank);  // no peer reads my slice any more
}

// send: [bytes] of this rank; rank s's bytes land at recv + s * recv_stride.
__global__ void __launch_bounds__(kPeerThreads) all_gather_kernel(PeerDeviceView view, int rank, const std::byte* send,
                                                                  std::byte* recv, size_t bytes, size_t recv_stride) {
  const size_t units = unit_count(bytes);
  const bool send_aligned = is_aligned(send);
  Unit* mine = reinterpret_cast<Unit*>(view.data[rank]);
  for (size_t u = first_unit(); u < units; u += unit_stride()) mine[u] = load_unit(send, bytes, u, send_aligned);
  barrier(view, rank);
  for (int s = 0; s < view.ranks; ++s) {
    std::byte* out = recv + s * recv_stride;
    const bool out_aligned = is_aligned(out);
    for (size_t u = first_unit(); u < units; u += unit_stride())
      store_unit(out, bytes, u, out_aligned, load_staged(view, s, u));
  }
  barrier(view, rank);
}

// One thread per unit up to the world's block cap; the same on every rank for the same bytes.
int grid_blocks(const PeerDeviceView& view, size_t bytes) {
  const size_t units = (bytes + kPeerUnitBytes - 1) / kPeerUnitBytes;
  const size_t wanted = (units + kPeerThreads - 1) / kPeerThreads;
  return static_cast<int>(std::clamp<size_t>(wanted, 1, static_cast<size_t>(view.max_blocks)));
}

void check_chunk(const PeerDeviceView& view, int rank, size_t bytes, const char* op) {
  TACHYON_CHECK(rank >= 0 && rank < view.ranks) << op << ": rank " << rank << " outside a world of " << view.ranks;
  TACHYON_CHECK(bytes > 0 && bytes <= view.capacity)
      << op << ": a chunk of " << bytes << " bytes must be in (0, " << view.capacity << "] (the world's buffer)";
}

template <ReduceType kType>
void launch_all_reduce(const PeerDeviceView& view, int rank, PeerPath path, const std::byte* send, std::byte* recv,
                       size_t bytes, cudaStream_t stream) {
  const int blocks = grid_blocks(view, bytes);
  if (path == PeerPath::kOneShot) {
    one_shot_all_reduce_kernel<kType><<<blocks, kPeerThreads, 0, stream>>>(view, rank, send, recv, bytes);
  } else {
    two_shot_all_reduce_kernel<kType><<<blocks, kPeerThreads, 0, stream>>>(view, rank, send, recv, bytes);
  }
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_peer_all_reduce(const PeerDeviceView& view, int rank, PeerPath path, ReduceType type, const void* send,
                            void* recv, size_t bytes, cudaStream_t stream) {
  check_chunk(view, rank, bytes, "peer all_reduce");
  TACHYON_CHECK(path == PeerPath::kOneShot || path == PeerPath::kTwoShot)
      << "peer all_reduce: path " << peer_path_name(path) << " is not a kernel";
  TACHYON_CHECK(bytes % reduce_type_size(type) == 0)
      << "peer all_reduce: " << bytes << " bytes is not a whole number of " << reduce_type_name(type) << " elements";
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  switch (type) {
    case ReduceType::kF32:
      return launch_all_reduce<ReduceType::kF32>(view, rank, path, in, out, bytes, stream);
    case ReduceType::kBF16:
      return launch_all_reduce<ReduceType::kBF16>(view, rank, path, in, out, bytes, stream);
    case ReduceType::kF16:
      return launch_all_reduce<ReduceType::kF16>(view, rank, path, in, out, bytes, stream);
    case ReduceType::kI32:
    case ReduceType::kI64:
      break;
  }
  TACHYON_FAIL() << "peer all_reduce sums f32, bf16 and f16, not " << reduce_type_name(type);
}

void launch_peer_all_gather(const PeerDeviceView& view, int rank, const void* send, void* recv, size_t bytes,
                            size_t recv_stride, cudaStream_t stream) {
  check_chunk(view, rank, bytes, "peer all_gather");
  TACHYON_CHECK(recv_stride >= bytes) << "peer all_gather: recv_stride " << recv_stride << " < " << bytes << " bytes";
  all_gather_kernel<<<grid_blocks(view, bytes), kPeerThreads, 0, stream>>>(
      view, rank, static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), bytes, recv_stride);
  TACHYON_CUDA_CHECK_LAUNCH();
}

}  // namespace tachyon::dist
