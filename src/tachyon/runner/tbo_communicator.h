// TboCommunicator: what one micro-batch's forward sees as its TP (and expert-parallel) group in a
// two-batch-overlap step. Every call is handed to the comm-phase helper (tbo_comm_phase.h), which
// stages it on the rank's comm stream and lends the compute stream to the other micro-batch
// meanwhile; the model's forward (dense_forward.h, tp_moe.h, expert_dispatch.h) is unchanged.
// Only the collectives that forward makes are served; the others throw, naming themselves.
// Tests: tests/unit/test_tbo_order.cpp, test_tbo_families.cpp.
#pragma once

#include "tachyon/dist/communicator.h"
#include "tachyon/runner/tbo_comm_phase.h"

namespace tachyon::runner {

class TboCommunicator : public dist::Communicator {
 public:
  TboCommunicator(TboCommPhases& phases, int micro_batch) : phases_(phases), micro_batch_(micro_batch) {}

  int rank() const override { return phases_.rank(); }
  int size() const override { return phases_.size(); }
  void all_reduce(const void* send, void* recv, size_t count, dist::ReduceType type, void* stream) override;
  void all_gather(const void* send, void* recv, size_t bytes, void* stream) override;
  void all_gatherv(std::span<const dist::GatherItem> items, void* stream) override;
  void all_to_all_v(std::span<const dist::AllToAllItem> items, void* stream) override;
  void reduce_scatter(const void* send, void* recv, size_t count, dist::ReduceType type, void* stream) override;
  void broadcast(void* data, size_t bytes, int root, void* stream) override;
  void send(const void* data, size_t bytes, int peer, void* stream) override;
  void recv(void* data, size_t bytes, int peer, void* stream) override;
  void send_recv(const void* send_data, size_t send_bytes, int dst, void* recv_data, size_t recv_bytes, int src,
                 void* stream) override;
  void barrier() override;

 private:
  TboCommPhases& phases_;
  int micro_batch_;
};

}  // namespace tachyon::runner
