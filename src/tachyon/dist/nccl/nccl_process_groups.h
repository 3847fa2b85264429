// NcclProcessGroups: builds a rank's ProcessGroups (process_groups.h) over NCCL for a
// ParallelConfig whose whole world lives on this node: one process, one worker thread per GPU
// (DESIGN), global rank r on the device its thread selected. It holds one ncclUniqueId per group
// instance (every TP group, every DP group, ...), generated up front on the constructing thread;
// each rank's thread then calls make(rank), which joins that rank's five groups.
//
// make() joins the groups one after another in GroupKind order (tp, dp, pcp, dcp, ep), each with
// a blocking ncclCommInitRank. No ncclGroupStart/End is needed: every rank joins in the same
// kind order and the groups of one kind partition the world, so every group a rank waits on is
// completed by members that are waiting on that same group (by induction over the kinds), and no
// cycle can form. A group of one rank still gets a (one-rank) NCCL communicator.
// Multi-node worlds (ids shipped over --master-addr/--master-port) are not built yet.
// Tests: tests/gpu/test_nccl_communicator.cpp. Docs: docs/parallelism.md ("NCCL backend").
#pragma once

#include <nccl.h>

#include <vector>

#include "tachyon/dist/parallel_config.h"
#include "tachyon/dist/process_groups.h"

namespace tachyon::dist {

class NcclProcessGroups {
 public:
  // Validates the config and generates one ncclUniqueId per group instance (multicast forced
  // off first, see nccl_communicator.h). Construct it before the rank threads start.
  explicit NcclProcessGroups(const ParallelConfig& config);

  const RankLayout& layout() const { return layout_; }

  // The communicators of global rank `rank`, on the CURRENT CUDA device. Call it from rank's
  // own worker thread (after its cudaSetDevice), once per rank, with every rank of the world
  // calling concurrently: it blocks until the members of each of its groups have joined. Use
  // and destroy the result on that thread (all ranks concurrently, see nccl_communicator.h).
  ProcessGroups make(int rank) const;

 private:
  RankLayout layout_;
  std::vector<std::vector<ncclUniqueId>> ids_;  // [GroupKind][group_index]
};

}  // namespace tachyon::dist
