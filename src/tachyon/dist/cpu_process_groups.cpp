// CpuProcessGroups: one CpuWorld per group instance, one CpuCommunicator per (rank, kind).
#include "tachyon/dist/cpu_process_groups.h"

#include <algorithm>

namespace tachyon::dist {

CpuProcessGroups::CpuProcessGroups(const ParallelConfig& config) : layout_(config) {
  for (GroupKind kind : kGroupKinds) {
    std::vector<std::unique_ptr<CpuWorld>>& worlds = worlds_.emplace_back();
    for (const std::vector<int>& members : layout_.groups(kind))
      worlds.push_back(std::make_unique<CpuWorld>(static_cast<int>(members.size())));
  }
}

ProcessGroups CpuProcessGroups::make(int rank) {
  ProcessGroups groups{.rank = rank, .coord = layout_.coord(rank)};
  auto build = [&](GroupKind kind) -> std::unique_ptr<Communicator> {
    std::vector<int> members = layout_.group(kind, rank);
    int group_rank = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
    CpuWorld& world = *worlds_[static_cast<int>(kind)][layout_.group_index(kind, rank)];
    return std::make_unique<CpuCommunicator>(world, group_rank);
  };
  groups.tp = build(GroupKind::kTp);
  groups.dp = build(GroupKind::kDp);
  groups.pcp = build(GroupKind::kPcp);
  groups.dcp = build(GroupKind::kDcp);
  groups.ep = build(GroupKind::kEp);
  return groups;
}

}  // namespace tachyon::dist
