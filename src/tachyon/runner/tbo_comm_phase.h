// The comm-phase helper of two-batch overlap (TBO): the ONE place through which every
// communication of a TBO step goes (tests/unit/check_tbo_comm.py fails the build's tests when a
// TBO file calls a communicator anywhere else). A phase of micro-batch mb:
//   1. compute stream: copies the phase's inputs into mb's arena (a write of its send region),
//      records event `staged`;
//   2. comm stream:    waits `staged`, runs the collective from the send region into the recv
//      region (a read of one, a write of the other), records event `done`;
//   3. compute stream: hands itself to the other micro-batch (TboComputeStream::yield), which
//      computes while the collective runs; on its turn back waits `done`, reads the recv region
//      into the caller's buffers.
// Every read, write, record and wait goes into the rank's TboTrace, which tbo_order.h checks.
//
// Planned memory (DESIGN rule 4): each micro-batch owns its arena for the whole step, sized up
// front from its token count (tbo_arena_bytes) and never resized, so nothing the comm stream may
// still read or write is handed to the other micro-batch or returned to a pool; the arenas are
// released only after the compute stream has waited on the step's last comm event
// (finish_step, traced as a write of every region). The copies in and out are what adapting
// the CPU forward's own vectors costs; a GPU forward would write into the arena directly.
// TboHooks are test-only mutations that the checker must catch.
// Tests: tests/unit/test_tbo_order.cpp, test_tbo_families.cpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "tachyon/dist/communicator.h"
#include "tachyon/model/model_config.h"
#include "tachyon/runner/tbo_order.h"
#include "tachyon/runner/tbo_stream.h"

namespace tachyon::runner {

// One micro-batch's comm buffers for one step, and their ids in the trace.
struct TboArena {
  TboArena(size_t bytes, int first_buffer_id)
      : send(bytes), recv(bytes), send_buffer(first_buffer_id), recv_buffer(first_buffer_id + 1) {}
  std::vector<std::byte> send;  // [bytes] the phase's inputs, staged by the compute stream
  std::vector<std::byte> recv;  // [bytes] the phase's outputs, written by the comm stream
  int send_buffer;
  int recv_buffer;
};

// Bytes each region of a micro-batch's arena needs for any collective of the TP/EP forward
// (tp_moe.h, expert_dispatch.h, dense_forward.h) over `tokens` tokens and `logits_rows` LM-head
// rows in a group of `group_size` ranks: the largest of a [tokens, hidden] all-reduce, the
// expert dispatch and return ([tokens * top_k] rows of hidden values and expert ids), the row
// counts ([group, group] int64) and the LM head's gathered [rows, vocab] logits.
size_t tbo_arena_bytes(const model::ModelConfig& config, int64_t tokens, int64_t logits_rows, int group_size);

// Test-only mutations of the mechanism; the checker must fail the step for each.
struct TboHooks {
  // Micro-batch 1's phase with this index reads its outputs without waiting for its event.
  int drop_wait_phase = -1;
  // Micro-batch 1 stages into micro-batch 0's arena: a buffer the comm stream may still use for
  // micro-batch 0 reused by the other micro-batch too early (the seed's bug).
  bool share_arena = false;
};

class TboCommPhases {
 public:
  // comm: the rank's real group (TP, which is also the EP group); arenas: [2] per micro-batch.
  TboCommPhases(dist::Communicator& comm, TboComputeStream& compute, TboCommStream& stream, TboTrace& trace,
                std::array<TboArena*, 2> arenas, TboHooks hooks = {});

  // The collectives of the forward, as dist::Communicator documents them, for micro-batch mb.
  void all_reduce(int mb, const void* send, void* recv, size_t count, dist::ReduceType type);
  void all_gather(int mb, const void* send, void* recv, size_t bytes);
  void all_gatherv(int mb, std::span<const dist::GatherItem> items);
  void all_to_all_v(int mb, std::span<const dist::AllToAllItem> items);

  // End of the step, after both micro-batches: the compute stream waits on the last comm event,
  // then the arenas are released. Rethrows a collective's error.
  void finish_step();

  int rank() const { return comm_.rank(); }
  int size() const { return comm_.size(); }

 private:
  struct In {
    const void* data;
    size_t bytes;
  };
  struct Out {
    void* data;
    size_t bytes;
  };
  // Runs the collective on the comm stream with the staged copies of `ins` ([ins] pointers into
  // the send region) and the places of `outs` in the recv region.
  using Collective = std::function<void(dist::Communicator&, const std::vector<std::byte*>& sends,
                                        const std::vector<std::byte*>& recvs)>;
  void run_phase(int mb, const char* name, std::span<const In> ins, std::span<const Out> outs, Collective collective);
  std::shared_ptr<TboEvent> new_event();

  dist::Communicator& comm_;
  TboComputeStream& compute_;
  TboCommStream& stream_;
  TboTrace& trace_;
  std::array<TboArena*, 2> arenas_;
  TboHooks hooks_;
  std::array<int, 2> phases_ = {0, 0};   // [mb] phases run so far
  int events_ = 0;
  std::shared_ptr<TboEvent> last_done_;  // the last phase's `done`
};

}  // namespace tachyon::runner
