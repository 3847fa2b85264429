// Communicator: the collectives of one process group (a TP group, a DP group, ...), on raw bytes.
// Gathers, broadcasts and point-to-point move bytes and never look at element types; only
// reductions take a ReduceType, and the only reduction is a sum. Two implementations share this
// interface: CpuCommunicator (ranks are threads of one process, tests and CPU runs) and
// NcclCommunicator (dist/nccl/, one per GPU thread). Nothing here names a CUDA type: every data call takes an opaque `stream`
// (a cudaStream_t on GPU backends, ignored by the CPU backend) and is ordered on it there.
//
// Contract, for every collective: each rank of the group makes the same sequence of calls with
// matching arguments (same op, same counts, same root, same ReduceType). Sizes are in bytes for
// byte-moving ops and in elements for reductions. Buffers must not overlap except in the
// in-place forms listed per method. On a GPU backend a call returns once the work is enqueued:
// buffers stay valid and untouched until the stream reaches it (DESIGN rule 4).
// The grouped all_gatherv is DESIGN rule 5: a layer gathers all its tensors in ONE collective.
// Docs: docs/parallelism.md. Tests: tests/unit/test_cpu_communicator.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "tachyon/base/check.h"

namespace tachyon::dist {

// A collective this backend does not implement yet (all_to_all_v on the peer-access backend):
// thrown before anything is enqueued, so the caller can refuse the layout instead.
class NotImplementedOnBackend : public Error {
 public:
  using Error::Error;
};

// Element types a reduction can sum. bf16 and f16 are raw 16-bit patterns (tensor/dtype.h).
enum class ReduceType { kF32, kBF16, kF16, kI32, kI64 };

size_t reduce_type_size(ReduceType type);
std::string_view reduce_type_name(ReduceType type);  // "f32", "bf16", "f16", "i32", "i64"

// One tensor of a grouped all_gatherv. Each rank contributes a byte run of its own length
// (zero allowed); every rank receives all runs concatenated in rank order. Dtypes do not matter
// (f32, bf16, fp8, int ids, scales: bytes are bytes), so one call can carry a layer's mixed
// tensors. recv_counts must hold the same values on every rank.
struct GatherItem {
  const void* send = nullptr;           // [send_bytes] this rank's bytes (may be null when 0)
  size_t send_bytes = 0;                // must equal recv_counts[rank()]
  void* recv = nullptr;                 // [sum(recv_counts)] bytes: rank 0's run, rank 1's run, ...
  std::span<const size_t> recv_counts;  // [size()] bytes that rank r contributes; caller keeps it alive
};

// One tensor of a grouped all_to_all_v. Rank q sends send_counts[r] bytes to rank r, as
// consecutive runs of its send buffer in rank order, and receives recv_counts[r] bytes from
// rank r, as consecutive runs of its recv buffer in rank order. Zero counts are allowed. The
// counts must agree across the group: recv_counts[r] on rank q == send_counts[q] on rank r
// (exchange them first, e.g. with an all_gather of each rank's send_counts).
struct AllToAllItem {
  const void* send = nullptr;           // [sum(send_counts)] bytes: the run for rank 0, rank 1, ...
  std::span<const size_t> send_counts;  // [size()] bytes this rank sends to rank r
  void* recv = nullptr;                 // [sum(recv_counts)] bytes: the run from rank 0, rank 1, ...
  std::span<const size_t> recv_counts;  // [size()] bytes this rank receives from rank r
};

// Byte offset of the run for (or from) rank `rank` in a buffer laid out by `counts` [size()]:
// sum of counts[0..rank).
size_t run_offset(std::span<const size_t> counts, int rank);

// Byte offset of rank `rank`'s run inside an item's recv buffer: sum of recv_counts[0..rank).
size_t gather_offset(const GatherItem& item, int rank);
// Total bytes an item's recv buffer holds: sum of recv_counts.
size_t gather_total_bytes(const GatherItem& item);

class Communicator {
 public:
  virtual ~Communicator() = default;

  // This rank's index in the group, in [0, size()), and the group's number of ranks.
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Element-wise sum over the group:
  //   send: [count] elements of `type` from this rank
  //   recv: [count] elements of `type`, the sum over ranks; recv == send (in place) allowed.
  // Every rank gets the same bits. The CPU backend adds ranks 0..size-1 in order, in f32 for
  // bf16/f16 and with wrap-around for ints; NCCL's order differs, so f32/bf16 results of the two
  // backends may differ in the last bits.
  virtual void all_reduce(const void* send, void* recv, size_t count, ReduceType type, void* stream) = 0;

  // Equal-size gather in rank order:
  //   send: [bytes] from this rank
  //   recv: [size()][bytes]; rank r's bytes land at recv + r * bytes.
  // In place: send == recv + rank() * bytes.
  virtual void all_gather(const void* send, void* recv, size_t bytes, void* stream) = 0;

  // Sum, then scatter equal blocks:
  //   send: [size()][count] elements of `type`
  //   recv: [count] elements: block rank() of the element-wise sum over ranks.
  // In place: recv == send + rank() * count elements. Summation order as in all_reduce.
  virtual void reduce_scatter(const void* send, void* recv, size_t count, ReduceType type, void* stream) = 0;

  // Copies root's `bytes` at `data` into every other rank's `data`: [bytes] on every rank.
  virtual void broadcast(void* data, size_t bytes, int root, void* stream) = 0;

  // Grouped uneven gather (DESIGN rule 5): every item is gathered as described on GatherItem,
  // all items in ONE collective. Every rank passes the same number of items in the same order.
  // In place per item: send == recv + gather_offset(item, rank()).
  virtual void all_gatherv(std::span<const GatherItem> items, void* stream) = 0;

  // Grouped uneven all-to-all: every item is exchanged as described on AllToAllItem, all items
  // in ONE collective (DESIGN rule 5). Every rank passes the same number of items in the same
  // order. No in-place form: send and recv must not overlap. The CPU and NCCL backends implement
  // it; the peer-access communicator throws NotImplementedOnBackend (docs/parallelism.md).
  virtual void all_to_all_v(std::span<const AllToAllItem> items, void* stream) = 0;

  // Point to point with rank `peer` of this group (peer == rank() allowed). Each send is matched
  // by one recv on the peer with the same byte count; messages between a pair arrive in order.
  //   send: data [bytes] read;   recv: data [bytes] written.
  // Portability: NCCL may hold a send until the peer posts its recv, so a pattern where two
  // ranks both send first can hang there (the CPU backend buffers sends and never does). Use
  // send_recv for exchanges and rings.
  virtual void send(const void* data, size_t bytes, int peer, void* stream) = 0;
  virtual void recv(void* data, size_t bytes, int peer, void* stream) = 0;
  // Sends send_data [send_bytes] to `dst` and receives recv_data [recv_bytes] from `src` as one
  // operation that cannot deadlock (ring step: dst = rank+1, src = rank-1). Buffers must not overlap.
  virtual void send_recv(const void* send_data, size_t send_bytes, int dst, void* recv_data, size_t recv_bytes, int src,
                         void* stream) = 0;

  // Host rendezvous: returns once every rank of the group has called barrier(). Orders no
  // stream work (synchronize the stream first if device work must be done).
  virtual void barrier() = 0;
};

}  // namespace tachyon::dist
