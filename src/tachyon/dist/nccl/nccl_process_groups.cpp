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
  // Joins block until every member arrives; the shared GroupKind order keeps them from deadlocking
  // (see the header).
  return make_process_groups(layout_, rank, [&](const GroupMembership& m) -> std::unique_ptr<Communicator> {
    const ncclUniqueId& id = ids_[static_cast<int>(m.kind)][m.group_index];
    return std::make_unique<NcclCommunicator>(id, m.size, m.rank);
  });
}

}  // namespace tachyon::dist
