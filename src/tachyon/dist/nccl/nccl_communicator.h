// NcclCommunicator: the Communicator (communicator.h) over NCCL, for ranks that are GPUs. Built
// only when CUDA is on and NCCL is found (TACHYON_HAVE_NCCL); compiled everywhere CUDA is, run
// and verified only on the GPU machine (tests/gpu/test_nccl_communicator.cpp).
//
// One NcclCommunicator is one rank of one group on one GPU. The process model is DESIGN's: one
// process per node, one worker thread per GPU; each thread selects its device (cudaSetDevice)
// and builds its own communicators, one per group it belongs to. Every data call is enqueued on
// the `stream` argument (a cudaStream_t of this communicator's device) and returns once
// enqueued; buffers are device memory and stay valid until the stream reaches the call.
//
// Mapping to NCCL:
//   all_reduce / reduce_scatter  ncclAllReduce / ncclReduceScatter, ncclSum, ReduceType ->
//                                ncclFloat32, ncclBfloat16, ncclFloat16, ncclInt32, ncclInt64
//   all_gather / broadcast       ncclAllGather / ncclBroadcast on ncclUint8 (bytes are bytes)
//   all_gatherv                  ONE group (ncclGroupStart/End) holding, for every item and every
//                                rank with a non-zero count, an ncclBroadcast rooted at that rank
//                                into recv + gather_offset: one launch for all items and ranks.
//                                Alternative not taken: pad every run to the item's max count, one
//                                ncclAllGather per item, then a compaction kernel (more bytes on the
//                                wire when counts are uneven, an extra kernel, a padded scratch).
//   all_to_all_v                 ONE group holding, for every item and every peer with a non-zero
//                                count, an ncclSend of this rank's run for it and an ncclRecv of its
//                                run for this rank (the run to itself included: NCCL matches a self
//                                send/recv inside a group). Counts are not exchanged here: the
//                                caller's counts must agree across ranks (communicator.h).
//   send / recv / send_recv      ncclSend / ncclRecv; send_recv groups the pair so it cannot hang.
//   barrier                      an ncclAllReduce of one int on a private stream, then a
//                                cudaStreamSynchronize of that stream: a host rendezvous that,
//                                like the contract says, orders none of the caller's streams.
// Zero-size operations enqueue nothing (every rank agrees on sizes, so every rank skips).
//
// Differences from the CPU backend, all allowed by the contract:
//   - Sums run in NCCL's order (ring/tree), so f32/bf16/f16 results may differ from the CPU's
//     in the last bits; byte-moving ops are bit-identical.
//   - Argument errors this rank can see alone (a root or peer out of range, send_bytes !=
//     recv_counts[rank], counts of the wrong length, all_to_all_v's run to itself sized
//     differently on its two sides) throw on this rank only, before
//     anything is enqueued; arguments that DIFFER between ranks are not detected (NCCL would
//     hang or corrupt): the caller's bug, as the contract says.
//   - A lone send or recv with peer == rank() throws: NCCL only matches a self send with a self
//     recv in the same group, which is what send_recv(..., rank(), ..., rank()) does.
//   - A lone send may wait until the peer posts its recv (see communicator.h).
//
// Multicast: NVLink SHARP (NVLS) multicast must stay off on the shared GPU machines (it can put
// their GPUs out of service): nccl_unique_id() forces NCCL_NVLS_ENABLE=0 in the
// environment before NCCL first reads it, and nothing here calls cuMulticastCreate.
//
// Lifetime: the constructor blocks until every rank of the group has joined (ncclCommInitRank),
// so all ranks construct concurrently from their own threads; likewise destroy every rank's
// communicator from its own thread (ncclCommDestroy may wait for its peers), after the streams
// that used it are done.
//
// Bootstrap: GPUs of one node in one process (nccl_unique_id() handed to N threads, or
// make_local_nccl_communicators() for a single thread over N devices); across nodes,
// nccl_unique_id_at(addr, port), NCCL's own bootstrap at a known address (NCCL_COMM_ID).
// Docs: docs/parallelism.md ("NCCL backend").
#pragma once

#include <nccl.h>

#include <string>

#include <memory>
#include <span>
#include <vector>

#include "tachyon/dist/communicator.h"

namespace tachyon::dist {

// Throws tachyon::Error naming the call, NCCL's error string and its last error message.
#define TACHYON_NCCL_CHECK(call)                                                                          \
  do {                                                                                                    \
    const ncclResult_t tachyon_nccl_status = (call);                                                      \
    TACHYON_CHECK(tachyon_nccl_status == ncclSuccess)                                                     \
        << #call << ": " << ncclGetErrorString(tachyon_nccl_status) << " (" << ncclGetLastError(nullptr) \
        << ")";                                                                                           \
  } while (0)

// Forces NCCL_NVLS_ENABLE=0 (multicast off, see above). Called by nccl_unique_id() and
// make_local_nccl_communicators(); call it yourself before any other NCCL call otherwise.
// Not thread-safe (setenv): call it before the rank threads start.
void nccl_disable_multicast();

// A fresh id for one communicator (one group instance): generate it once, before the rank
// threads start, and hand the same id to every rank of that group. Disables multicast first.
ncclUniqueId nccl_unique_id();
// The id of a group spanning processes or nodes, the same in every process without shipping it:
// sets NCCL_COMM_ID=addr:port (process-wide, kept set: NCCL reads it again when rank 0 joins and
// starts its bootstrap root listening there) and returns NCCL's id for that address. Rank 0 of
// the group must run on the host `addr` names. One such group per process: every later NCCL
// communicator of the process would also find NCCL_COMM_ID set.
ncclUniqueId nccl_unique_id_at(const std::string& addr, int port);

ncclDataType_t nccl_data_type(ReduceType type);

class NcclCommunicator final : public Communicator {
 public:
  // Joins communicator `id` as `rank` of `size` on the CURRENT CUDA device; blocks until all
  // `size` ranks have joined (each from its own thread, each on its own device).
  NcclCommunicator(const ncclUniqueId& id, int size, int rank);
  // Takes ownership of an initialized communicator (from ncclCommInitAll).
  explicit NcclCommunicator(ncclComm_t comm);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }   // the CUDA device the communicator runs on
  ncclComm_t comm() const { return comm_; }

  void all_reduce(const void* send, void* recv, size_t count, ReduceType type, void* stream) override;
  void all_gather(const void* send, void* recv, size_t bytes, void* stream) override;
  void reduce_scatter(const void* send, void* recv, size_t count, ReduceType type, void* stream) override;
  void broadcast(void* data, size_t bytes, int root, void* stream) override;
  void all_gatherv(std::span<const GatherItem> items, void* stream) override;
  void all_to_all_v(std::span<const AllToAllItem> items, void* stream) override;
  void send(const void* data, size_t bytes, int peer, void* stream) override;
  void recv(void* data, size_t bytes, int peer, void* stream) override;
  void send_recv(const void* send_data, size_t send_bytes, int dst, void* recv_data, size_t recv_bytes, int src,
                 void* stream) override;
  void barrier() override;

 private:
  void init_state();  // reads rank/size/device from comm_ and allocates the barrier's stream and int
  void check_peer(const char* op, int peer) const;

  ncclComm_t comm_ = nullptr;
  int rank_ = 0;
  int size_ = 0;
  int device_ = 0;
  void* barrier_stream_ = nullptr;  // cudaStream_t, non-blocking, private to barrier()
  int* barrier_value_ = nullptr;    // one device int
};

// One communicator over `devices` (rank i on devices[i]) built by ONE thread with
// ncclCommInitAll. Each communicator is then used from its device's worker thread (a blocking
// NCCL collective issued from a single thread for several devices would need ncclGroupStart/End
// around the per-device calls, which the Communicator interface does not expose).
// Disables multicast first. The current device is restored on return.
std::vector<std::unique_ptr<NcclCommunicator>> make_local_nccl_communicators(std::span<const int> devices);

}  // namespace tachyon::dist
