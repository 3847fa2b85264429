// CpuProcessGroups: builds the ProcessGroups of a world of thread ranks from a ParallelConfig.
// It owns one CpuWorld per group instance (every TP group, every DP group, ...), shared by that
// group's member threads; each rank's communicators point into those worlds, so this object must
// outlive them. Tests: tests/unit/test_cpu_communicator.cpp (ProcessGroups tests).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/dist/parallel_config.h"
#include "tachyon/dist/process_groups.h"

namespace tachyon::dist {

class CpuProcessGroups {
 public:
  explicit CpuProcessGroups(const ParallelConfig& config);  // validates the config

  const RankLayout& layout() const { return layout_; }

  // The communicators of global rank `rank`. Call once per rank (from any thread); use each
  // rank's communicators from that rank's thread only.
  ProcessGroups make(int rank);

  // Aborts every group's world (CpuWorld::abort): for a rank that failed outside a collective, so
  // that its peers in any of its groups stop waiting for it. Any thread may call it.
  void abort(const std::string& reason);

 private:
  RankLayout layout_;
  std::vector<std::vector<std::unique_ptr<CpuWorld>>> worlds_;  // [GroupKind][group_index]
};

}  // namespace tachyon::dist
