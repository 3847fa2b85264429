// The one path of every TBO communication (see tbo_comm_phase.h). The only file of the TBO path
// that calls a communicator (tests/unit/check_tbo_comm.py).
#include "tachyon/runner/tbo_comm_phase.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>

#include "tachyon/base/check.h"

namespace tachyon::runner {
namespace {

constexpr size_t kArenaAlign = 64;
size_t arena_align(size_t bytes) { return (bytes + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

size_t sum(std::span<const size_t> counts) { return std::accumulate(counts.begin(), counts.end(), size_t{0}); }

// Places `sizes` one after the other (aligned) in `region`; checks they fit the plan.
std::vector<std::byte*> lay_out(std::vector<std::byte>& region, std::span<const size_t> sizes, const std::string& what) {
  std::vector<std::byte*> places;
  size_t offset = 0;
  for (size_t bytes : sizes) {
    places.push_back(region.data() + offset);
    offset += arena_align(bytes);
  }
  TACHYON_CHECK(offset <= region.size()) << "internal: " << what << " needs " << offset
                                         << " bytes of its micro-batch's comm arena, planned " << region.size();
  return places;
}

}  // namespace

size_t tbo_arena_bytes(const model::ModelConfig& c, int64_t tokens, int64_t logits_rows, int group_size) {
  const int64_t top_k = std::max<int64_t>(c.num_experts_per_tok, 1);
  const int64_t values = std::max({tokens * c.hidden_size,                  // an all-reduce or all_gatherv of [n, hidden]
                                   tokens * top_k * (c.hidden_size + top_k),  // dispatch rows + ids, or returned pairs
                                   logits_rows * c.vocab_size});              // the LM head's gathered logits
  const int64_t counts = int64_t{group_size} * group_size * 8;              // the EP row counts
  return arena_align(static_cast<size_t>(values) * sizeof(float)) + arena_align(static_cast<size_t>(counts)) + 4 * kArenaAlign;
}

TboCommPhases::TboCommPhases(dist::Communicator& comm, TboComputeStream& compute, TboCommStream& stream,
                             TboTrace& trace, std::array<TboArena*, 2> arenas, TboHooks hooks)
    : comm_(comm), compute_(compute), stream_(stream), trace_(trace), arenas_(arenas), hooks_(hooks) {}

std::shared_ptr<TboEvent> TboCommPhases::new_event() { return std::make_shared<TboEvent>(events_++); }

void TboCommPhases::run_phase(int mb, const char* name, std::span<const In> ins, std::span<const Out> outs,
                              Collective collective) {
  TboArena& arena = *arenas_[static_cast<size_t>(hooks_.share_arena ? 0 : mb)];
  const int phase = phases_[static_cast<size_t>(mb)]++;
  const std::string what = "micro-batch " + std::to_string(mb) + " phase " + std::to_string(phase) + " " + name;
  std::vector<size_t> in_bytes, out_bytes;
  for (const In& in : ins) in_bytes.push_back(in.bytes);
  for (const Out& out : outs) out_bytes.push_back(out.bytes);
  const std::vector<std::byte*> sends = lay_out(arena.send, in_bytes, what);
  const std::vector<std::byte*> recvs = lay_out(arena.recv, out_bytes, what);

  // 1. Compute stream: stage the inputs, record `staged`.
  for (size_t i = 0; i < ins.size(); ++i) {
    if (ins[i].bytes > 0) std::memcpy(sends[i], ins[i].data, ins[i].bytes);
  }
  trace_.add({TboStreamKind::kCompute, TboAccess::kWrite, arena.send_buffer, -1, what + ": stage the inputs"});
  const std::shared_ptr<TboEvent> staged = new_event(), done = new_event();
  trace_.add({TboStreamKind::kCompute, TboAccess::kRecord, -1, staged->id(), what + ": staged"});
  staged->record();

  // 2. Comm stream: wait `staged`, run the collective, record `done` (also after an error, so no waiter hangs).
  stream_.enqueue([this, &arena, what, staged, done, sends, recvs, collective = std::move(collective)](bool failed) {
    staged->wait();
    trace_.add({TboStreamKind::kComm, TboAccess::kWait, -1, staged->id(), what + ": wait for the staged inputs"});
    trace_.add({TboStreamKind::kComm, TboAccess::kRead, arena.send_buffer, -1, what + ": send"});
    trace_.add({TboStreamKind::kComm, TboAccess::kWrite, arena.recv_buffer, -1, what + ": receive"});
    std::exception_ptr error;
    if (!failed) {
      try {
        collective(comm_, sends, recvs);
      } catch (...) {
        error = std::current_exception();
      }
    }
    trace_.add({TboStreamKind::kComm, TboAccess::kRecord, -1, done->id(), what + ": done"});
    done->record();
    if (error) std::rethrow_exception(error);
  });
  last_done_ = done;

  // 3. Compute stream: the other micro-batch computes meanwhile; then wait `done` and read the outputs.
  compute_.yield(mb);
  const bool drop_wait = mb == 1 && phase == hooks_.drop_wait_phase;
  if (!drop_wait) {
    done->wait();
    trace_.add({TboStreamKind::kCompute, TboAccess::kWait, -1, done->id(), what + ": wait for the outputs"});
  }
  stream_.rethrow_if_failed();
  trace_.add({TboStreamKind::kCompute, TboAccess::kRead, arena.recv_buffer, -1, what + ": read the outputs"});
  for (size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].bytes > 0) std::memcpy(outs[i].data, recvs[i], outs[i].bytes);
  }
}

void TboCommPhases::all_reduce(int mb, const void* send, void* recv, size_t count, dist::ReduceType type) {
  const size_t bytes = count * dist::reduce_type_size(type);
  const In in{send, bytes};
  const Out out{recv, bytes};
  run_phase(mb, "all_reduce", {&in, 1}, {&out, 1},
            [count, type](dist::Communicator& comm, const std::vector<std::byte*>& s, const std::vector<std::byte*>& r) {
              comm.all_reduce(s[0], r[0], count, type, nullptr);
            });
}

void TboCommPhases::all_gather(int mb, const void* send, void* recv, size_t bytes) {
  const In in{send, bytes};
  const Out out{recv, bytes * static_cast<size_t>(comm_.size())};
  run_phase(mb, "all_gather", {&in, 1}, {&out, 1},
            [bytes](dist::Communicator& comm, const std::vector<std::byte*>& s, const std::vector<std::byte*>& r) {
              comm.all_gather(s[0], r[0], bytes, nullptr);
            });
}

void TboCommPhases::all_gatherv(int mb, std::span<const dist::GatherItem> items) {
  std::vector<In> ins;
  std::vector<Out> outs;
  std::vector<std::vector<size_t>> counts;  // [items][ranks]: the phase keeps its own copy
  std::vector<size_t> send_bytes;
  for (const dist::GatherItem& item : items) {
    ins.push_back({item.send, item.send_bytes});
    outs.push_back({item.recv, sum(item.recv_counts)});
    counts.emplace_back(item.recv_counts.begin(), item.recv_counts.end());
    send_bytes.push_back(item.send_bytes);
  }
  run_phase(mb, "all_gatherv", ins, outs,
            [counts, send_bytes](dist::Communicator& comm, const std::vector<std::byte*>& s,
                                 const std::vector<std::byte*>& r) {
              std::vector<dist::GatherItem> staged;
              for (size_t i = 0; i < counts.size(); ++i) staged.push_back({s[i], send_bytes[i], r[i], counts[i]});
              comm.all_gatherv(staged, nullptr);
            });
}

void TboCommPhases::all_to_all_v(int mb, std::span<const dist::AllToAllItem> items) {
  std::vector<In> ins;
  std::vector<Out> outs;
  std::vector<std::vector<size_t>> send_counts, recv_counts;  // [items][ranks]
  for (const dist::AllToAllItem& item : items) {
    ins.push_back({item.send, sum(item.send_counts)});
    outs.push_back({item.recv, sum(item.recv_counts)});
    send_counts.emplace_back(item.send_counts.begin(), item.send_counts.end());
    recv_counts.emplace_back(item.recv_counts.begin(), item.recv_counts.end());
  }
  run_phase(mb, "all_to_all_v", ins, outs,
            [send_counts, recv_counts](dist::Communicator& comm, const std::vector<std::byte*>& s,
                                       const std::vector<std::byte*>& r) {
              std::vector<dist::AllToAllItem> staged;
              for (size_t i = 0; i < send_counts.size(); ++i) staged.push_back({s[i], send_counts[i], r[i], recv_counts[i]});
              comm.all_to_all_v(staged, nullptr);
            });
}

void TboCommPhases::finish_step() {
  if (last_done_) {
    last_done_->wait();  // the comm stream is in order: its last event ends every phase
    trace_.add({TboStreamKind::kCompute, TboAccess::kWait, -1, last_done_->id(), "end of step: wait for the last phase"});
  }
  stream_.synchronize();
  for (const TboArena* arena : arenas_) {
    trace_.add({TboStreamKind::kCompute, TboAccess::kWrite, arena->send_buffer, -1, "end of step: release the arena"});
    trace_.add({TboStreamKind::kCompute, TboAccess::kWrite, arena->recv_buffer, -1, "end of step: release the arena"});
  }
  stream_.rethrow_if_failed();
}

}  // namespace tachyon::runner
