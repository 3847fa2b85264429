// NcclProcessGroups: one ncclUniqueId per group instance, one NcclCommunicator per (rank, kind).
#include "tachyon/dist/nccl/nccl_process_groups.h"

#include <algorithm>

#include "tachyon/dist/nccl/nccl_communicator.h"

namespace tachyon::dist {

NcclProcessGroups::NcclProcessGroups(const ParallelConfig& config) : layout_(config) {
  for (GroupKind kind : kGroupKinds) {
    std::vector<ncclUniqueId>& ids = ids_.emplace_back();
    for (size_t i = 0; i < layout_.groups(kind).size(); ++i) ids.push_back(nccl_unique_id());
  }
}

ProcessGroups NcclProcessGroups::make(int rank) const {
  ProcessGroups groups{.rank = rank, .coord = layout_.coord(rank)};
  auto build = [&](GroupKind kind) -> std::unique_ptr<Communicator> {
    std::vector<int> members = layout_.group(kind, rank);
    int group_rank = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
    const ncclUniqueId& id = ids_[static_cast<int>(kind)][layout_.group_index(kind, rank)];
    return std::make_unique<NcclCommunicator>(id, static_cast<int>(members.size()), group_rank);
  };
  // GroupKind order on every rank: see the header for why this cannot deadlock.
  groups.tp = build(GroupKind::kTp);
  groups.dp = build(GroupKind::kDp);
  groups.pcp = build(GroupKind::kPcp);
  groups.dcp = build(GroupKind::kDcp);
  groups.ep = build(GroupKind::kEp);
  return groups;
}

}  // namespace tachyon::dist
