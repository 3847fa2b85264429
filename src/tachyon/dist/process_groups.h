// ProcessGroups: the communicators one rank holds, one per group kind of the RankLayout. A
// backend builds them (CpuProcessGroups, NcclProcessGroups) through make_process_groups; model
// and runner code only sees this.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <vector>

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

// Where a rank sits in one group instance of a kind: what a backend needs to join it.
struct GroupMembership {
  GroupKind kind = GroupKind::kTp;
  int group_index = 0;  // which instance of the kind (RankLayout::group_index)
  int size = 0;         // ranks in the instance
  int rank = 0;         // this rank's position in it
};

// Builds `rank`'s communicators in GroupKind order (tp, dp, pcp, dcp, ep), the same order on
// every rank, which backends whose joins block (NCCL) rely on.
inline ProcessGroups make_process_groups(
    const RankLayout& layout, int rank,
    const std::function<std::unique_ptr<Communicator>(const GroupMembership&)>& join) {
  ProcessGroups groups{.rank = rank, .coord = layout.coord(rank)};
  std::unique_ptr<Communicator>* slots[] = {&groups.tp, &groups.dp, &groups.pcp, &groups.dcp, &groups.ep};
  for (GroupKind kind : {GroupKind::kTp, GroupKind::kDp, GroupKind::kPcp, GroupKind::kDcp, GroupKind::kEp}) {
    const std::vector<int> members = layout.group(kind, rank);
    const int position = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
    *slots[static_cast<int>(kind)] =
        join({kind, layout.group_index(kind, rank), static_cast<int>(members.size()), position});
  }
  return groups;
}

}  // namespace tachyon::dist
