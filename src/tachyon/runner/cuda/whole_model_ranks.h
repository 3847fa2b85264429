// What the runners of whole-model GPU ranks share (prefill context parallelism,
// pcp_cuda_model_runner.h; data-parallel attention, dp_cuda_model_runner.h): the layout's checks,
// each rank joining its group on its own device, and a step's sampled sequences put back in plan
// order from the ranks that ran them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tachyon/core/engine_config.h"
#include "tachyon/core/step_output.h"
#include "tachyon/core/step_plan.h"
#include "tachyon/dist/communicator.h"
#include "tachyon/runner/cuda/tp_cuda_model_runner.h"
#include "tachyon/runner/rank_workers.h"

namespace tachyon::runner {

// `size` local ranks of one node, each on its own GPU, or (tests) sharing one with a fixed KV size
// per rank. `what` names the mode in the messages ("data-parallel attention").
void check_whole_model_layout(const TpCudaLayout& layout, const core::EngineConfig& config, int size,
                              const std::string& what);

// On rank `rank`'s worker thread: selects its GPU and joins the group of `size` through make_comm.
std::unique_ptr<dist::Communicator> join_rank_group(const TpCudaLayout& layout, const TpCommFactory& make_comm,
                                                    int rank, int size, const std::string& what);

// Ends every rank's runner, then its communicator, on the rank's worker thread (a CUDA runner and
// a communicator end where they were made). For destructors: never throws (a failing teardown
// leaves nothing for the caller to do).
template <typename Rank>
void tear_down_ranks(RankWorkers& workers, std::vector<Rank>& ranks) noexcept {
  try {
    workers.run([&](int r) {
      Rank& rank = ranks[static_cast<size_t>(r)];
      rank.runner.reset();
      rank.comm.reset();
    });
  } catch (...) {
  }
}

// The plan's sampled sequences in plan order, each taken from the output of the rank that ran it.
core::StepOutput sampled_in_plan_order(const core::StepPlan& plan, const std::vector<core::StepOutput*>& outputs,
                                       const std::string& what);

}  // namespace tachyon::runner
