// ParallelConfig and RankLayout: how the ranks of a world split into process groups. Groups are
// plain values (lists of global ranks) computed from the config; backends (CpuProcessGroups,
// later NCCL) turn each list into a Communicator.
//
// Sizes:
//   dp   data parallel: independent engine replicas (attention batches), each a TP x PCP slice
//   pcp  prefill context parallel: a long prompt's tokens split across pcp slices
//   tp   tensor parallel: weights and heads split across tp ranks
//   dcp  decode context parallel: splits the KV cache along tokens INSIDE a TP group, among the
//        dcp consecutive TP ranks that hold the same (replicated) KV heads; no extra ranks
//   ep   expert parallel: experts split across ep ranks drawn from the dp x tp ranks of one pcp
//        index (as in vLLM/SGLang, where experts span DP x TP); no extra ranks. ep = 1 keeps
//        every expert on every rank (MoE weights then split by tp like dense ones).
// world_size() = dp * pcp * tp.
//
// Rank layout, tp innermost so a TP group is consecutive ranks (one node, fastest links):
//   rank = (dp_rank * pcp + pcp_rank) * tp + tp_rank
// Example dp = 2, pcp = 1, tp = 4, dcp = 2, ep = 8:
//   rank      0 1 2 3 | 4 5 6 7
//   dp_rank   0 0 0 0 | 1 1 1 1
//   tp_rank   0 1 2 3 | 0 1 2 3
//   tp group  {0-3}     {4-7}
//   dcp group {0,1} {2,3} {4,5} {6,7}
//   dp group  {0,4} {1,5} {2,6} {3,7}
//   ep group  {0-7}   (ep = 4 would give {0-3} {4-7}: EP index = dp_rank * tp + tp_rank)
// Every group lists its members in ascending global rank; a rank's index in that list is its
// rank inside the group's communicator.
// Docs: docs/parallelism.md. Tests: tests/unit/test_parallel_config.cpp.
#pragma once

#include <string_view>
#include <vector>

namespace tachyon::dist {

struct ParallelConfig {
  int dp = 1;
  int tp = 1;
  int pcp = 1;
  int dcp = 1;
  int ep = 1;

  // Throws tachyon::Error with a clear message unless every size is >= 1, dcp divides tp and ep
  // divides dp * tp.
  void validate() const;
  int world_size() const { return dp * pcp * tp; }
  bool operator==(const ParallelConfig&) const = default;
};

enum class GroupKind { kTp, kDp, kPcp, kDcp, kEp };
inline constexpr GroupKind kGroupKinds[] = {GroupKind::kTp, GroupKind::kDp, GroupKind::kPcp, GroupKind::kDcp,
                                            GroupKind::kEp};
std::string_view group_kind_name(GroupKind kind);  // "tp", "dp", "pcp", "dcp", "ep"

// A rank's coordinates in the dp x pcp x tp grid.
struct RankCoord {
  int dp = 0;
  int pcp = 0;
  int tp = 0;
  bool operator==(const RankCoord&) const = default;
};

class RankLayout {
 public:
  explicit RankLayout(const ParallelConfig& config);  // validates the config

  const ParallelConfig& config() const { return config_; }
  int world_size() const { return config_.world_size(); }

  RankCoord coord(int rank) const;
  int rank(RankCoord coord) const;

  // Members of the group of `kind` that holds `rank`, ascending.
  std::vector<int> group(GroupKind kind, int rank) const;
  std::vector<int> tp_group(int rank) const { return group(GroupKind::kTp, rank); }
  std::vector<int> dp_group(int rank) const { return group(GroupKind::kDp, rank); }
  std::vector<int> pcp_group(int rank) const { return group(GroupKind::kPcp, rank); }
  std::vector<int> dcp_group(int rank) const { return group(GroupKind::kDcp, rank); }
  std::vector<int> ep_group(int rank) const { return group(GroupKind::kEp, rank); }

  // Which instance of `kind` holds `rank`: an index into groups(kind).
  int group_index(GroupKind kind, int rank) const;
  // Every group of `kind`, ordered by group_index; together they partition [0, world_size()).
  std::vector<std::vector<int>> groups(GroupKind kind) const;

 private:
  void check_rank(int rank) const;

  ParallelConfig config_;
};

}  // namespace tachyon::dist
