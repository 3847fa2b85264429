// A micro-batch's communicator in a TBO step: each collective is a comm phase (see tbo_communicator.h).
#include "tachyon/runner/tbo_communicator.h"

#include <string>

#include "tachyon/base/check.h"

namespace tachyon::runner {
namespace {

[[noreturn]] void not_in_tbo_forward(const char* call) {
  throw Error(std::string("two-batch overlap: ") + call +
              " is not a collective of the TBO forward, so no comm phase serves it (tbo_comm_phase.h)");
}

}  // namespace

void TboCommunicator::all_reduce(const void* send, void* recv, size_t count, dist::ReduceType type, void*) {
  phases_.all_reduce(micro_batch_, send, recv, count, type);
}

void TboCommunicator::all_gather(const void* send, void* recv, size_t bytes, void*) {
  phases_.all_gather(micro_batch_, send, recv, bytes);
}

void TboCommunicator::all_gatherv(std::span<const dist::GatherItem> items, void*) {
  phases_.all_gatherv(micro_batch_, items);
}

void TboCommunicator::all_to_all_v(std::span<const dist::AllToAllItem> items, void*) {
  phases_.all_to_all_v(micro_batch_, items);
}

void TboCommunicator::reduce_scatter(const void*, void*, size_t, dist::ReduceType, void*) {
  not_in_tbo_forward("reduce_scatter");
}
void TboCommunicator::broadcast(void*, size_t, int, void*) { not_in_tbo_forward("broadcast"); }
void TboCommunicator::send(const void*, size_t, int, void*) { not_in_tbo_forward("send"); }
void TboCommunicator::recv(void*, size_t, int, void*) { not_in_tbo_forward("recv"); }
void TboCommunicator::send_recv(const void*, size_t, int, void*, size_t, int, void*) {
  not_in_tbo_forward("send_recv");
}
void TboCommunicator::barrier() { not_in_tbo_forward("barrier"); }

}  // namespace tachyon::runner
