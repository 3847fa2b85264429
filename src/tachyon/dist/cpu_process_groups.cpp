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
  return make_process_groups(layout_, rank, [&](const GroupMembership& m) -> std::unique_ptr<Communicator> {
    return std::make_unique<CpuCommunicator>(*worlds_[static_cast<int>(m.kind)][m.group_index], m.rank);
  });
}

void CpuProcessGroups::abort(const std::string& reason) {
  for (std::vector<std::unique_ptr<CpuWorld>>& worlds : worlds_) {
    for (std::unique_ptr<CpuWorld>& world : worlds) world->abort(reason);
  }
}

}  // namespace tachyon::dist
