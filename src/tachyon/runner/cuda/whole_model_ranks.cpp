#include "tachyon/runner/cuda/whole_model_ranks.h"

#include <set>
#include <unordered_map>

#include "tachyon/base/check.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::runner {

void check_whole_model_layout(const TpCudaLayout& layout, const core::EngineConfig& config, int size,
                              const std::string& what) {
  TACHYON_CHECK(size >= 2 && static_cast<int>(layout.devices.size()) == size && layout.first_rank == 0)
      << what << " over " << size << " ranks needs that many local ranks, got " << layout.devices.size();
  if (layout.ranks_share_gpu) {
    TACHYON_CHECK(config.device.kv_cache_memory_bytes > 0)
        << "ranks that share a GPU need kv_cache_memory_bytes set (each would count the others' caches as its own)";
  } else {
    TACHYON_CHECK(std::set<int>(layout.devices.begin(), layout.devices.end()).size() == layout.devices.size())
        << what << " needs one GPU per rank";
  }
}

std::unique_ptr<dist::Communicator> join_rank_group(const TpCudaLayout& layout, const TpCommFactory& make_comm,
                                                    int rank, int size, const std::string& what) {
  TACHYON_CUDA_CHECK(cudaSetDevice(layout.devices[static_cast<size_t>(rank)]));
  std::unique_ptr<dist::Communicator> comm = make_comm(rank);
  TACHYON_CHECK(comm->size() == size && comm->rank() == rank)
      << "internal: " << what << " rank " << rank << " joined a group as rank " << comm->rank() << " of "
      << comm->size();
  return comm;
}

core::StepOutput sampled_in_plan_order(const core::StepPlan& plan, const std::vector<core::StepOutput*>& outputs,
                                       const std::string& what) {
  core::StepOutput output;
  std::unordered_map<int64_t, core::SequenceOutput*> sampled;  // sequence id -> the rank's output
  for (core::StepOutput* rank_output : outputs) {
    for (core::SequenceOutput& out : rank_output->sequences) sampled[out.sequence_id] = &out;
  }
  for (const core::ScheduledSequence& s : plan.sequences) {
    if (!s.sample) continue;
    auto found = sampled.find(s.sequence_id);
    TACHYON_CHECK(found != sampled.end()) << "internal: no " << what << " rank sampled sequence " << s.sequence_id;
    output.sequences.push_back(std::move(*found->second));
  }
  return output;
}

}  // namespace tachyon::runner
