// ProcessGroups: the communicators one rank holds, one per group kind of the RankLayout. A
// backend builds them (CpuProcessGroups now, NCCL later); model and runner code only sees this.
#pragma once

#include <memory>

#include "tachyon/base/check.h"
#include "tachyon/dist/communicator.h"
#include "tachyon/dist/parallel_config.h"

namespace tachyon::dist {

struct ProcessGroups {
  int rank = 0;     // global rank
  RankCoord coord;  // its (dp, pcp, tp) coordinates
  std::unique_ptr<Communicator> tp, dp, pcp, dcp, ep;

  Communicator& get(GroupKind kind) const {
    const std::unique_ptr<Communicator>* comms[] = {&tp, &dp, &pcp, &dcp, &ep};  // GroupKind order
    const std::unique_ptr<Communicator>& comm = *comms[static_cast<int>(kind)];
    TACHYON_CHECK(comm != nullptr) << "rank " << rank << " has no " << group_kind_name(kind) << " communicator";
    return *comm;
  }
};

}  // namespace tachyon::dist
