// ParallelConfig and RankLayout: for (dp, tp) = (1,1), (1,4), (2,2), (2,4), (3,2) with every
// valid pcp/dcp/ep choice, every rank sits in exactly one group of each kind, groups hold the
// ranks their definition says (tp consecutive, dcp inside tp, ep across dp x tp of one pcp
// index), and validate() rejects bad configs with messages that say what to fix.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tachyon/base/check.h"
#include "tachyon/dist/parallel_config.h"

namespace tachyon::dist {
namespace {

std::vector<ParallelConfig> all_configs() {
  std::vector<ParallelConfig> configs;
  for (auto [dp, tp] : std::vector<std::pair<int, int>>{{1, 1}, {1, 4}, {2, 2}, {2, 4}, {3, 2}})
    for (int pcp : {1, 2})
      for (int dcp = 1; dcp <= tp; ++dcp)
        for (int ep = 1; ep <= dp * tp; ++ep)
          if (tp % dcp == 0 && (dp * tp) % ep == 0)
            configs.push_back({.dp = dp, .tp = tp, .pcp = pcp, .dcp = dcp, .ep = ep});
  return configs;
}

std::string describe(const ParallelConfig& c) {
  return "dp=" + std::to_string(c.dp) + " tp=" + std::to_string(c.tp) + " pcp=" + std::to_string(c.pcp) +
         " dcp=" + std::to_string(c.dcp) + " ep=" + std::to_string(c.ep);
}

int expected_size(const ParallelConfig& c, GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp: return c.tp;
    case GroupKind::kDp: return c.dp;
    case GroupKind::kPcp: return c.pcp;
    case GroupKind::kDcp: return c.dcp;
    case GroupKind::kEp: return c.ep;
  }
  return -1;
}

TEST(RankLayout, CoordinatesRoundTripWithTpInnermost) {
  for (const ParallelConfig& config : all_configs()) {
    RankLayout layout(config);
    ASSERT_EQ(layout.world_size(), config.dp * config.pcp * config.tp);
    for (int rank = 0; rank < layout.world_size(); ++rank) {
      RankCoord c = layout.coord(rank);
      EXPECT_EQ(c.tp, rank % config.tp) << describe(config);
      EXPECT_EQ(layout.rank(c), rank) << describe(config);
    }
  }
}

TEST(RankLayout, EveryRankIsInExactlyOneGroupOfEachKind) {
  for (const ParallelConfig& config : all_configs()) {
    RankLayout layout(config);
    int world = layout.world_size();
    for (GroupKind kind : kGroupKinds) {
      std::string what = describe(config) + " " + std::string(group_kind_name(kind));
      std::vector<std::vector<int>> groups = layout.groups(kind);
      ASSERT_EQ(int(groups.size()), world / expected_size(config, kind)) << what;
      std::vector<int> times_seen(world, 0);
      for (size_t g = 0; g < groups.size(); ++g) {
        EXPECT_EQ(int(groups[g].size()), expected_size(config, kind)) << what;
        EXPECT_TRUE(std::is_sorted(groups[g].begin(), groups[g].end())) << what;
        for (int rank : groups[g]) {
          ++times_seen[rank];
          EXPECT_EQ(layout.group(kind, rank), groups[g]) << what << " rank " << rank;
          EXPECT_EQ(layout.group_index(kind, rank), int(g)) << what << " rank " << rank;
        }
      }
      for (int rank = 0; rank < world; ++rank) EXPECT_EQ(times_seen[rank], 1) << what << " rank " << rank;
    }
  }
}

TEST(RankLayout, GroupsHoldTheRanksTheirDefinitionSays) {
  for (const ParallelConfig& config : all_configs()) {
    RankLayout layout(config);
    for (int rank = 0; rank < layout.world_size(); ++rank) {
      std::string what = describe(config) + " rank " + std::to_string(rank);
      RankCoord me = layout.coord(rank);
      // TP: consecutive ranks, same dp and pcp.
      std::vector<int> tp = layout.tp_group(rank);
      for (int i = 0; i < config.tp; ++i) EXPECT_EQ(tp[i], tp[0] + i) << what;
      EXPECT_EQ(tp[0] % config.tp, 0) << what;
      // DCP: consecutive ranks inside this rank's TP group.
      std::vector<int> dcp = layout.dcp_group(rank);
      for (int i = 0; i < config.dcp; ++i) {
        EXPECT_EQ(dcp[i], dcp[0] + i) << what;
        EXPECT_NE(std::find(tp.begin(), tp.end(), dcp[i]), tp.end()) << what;
      }
      // DP: same pcp and tp coordinates, one member per dp index.
      std::vector<int> dp = layout.dp_group(rank);
      for (int d = 0; d < config.dp; ++d) EXPECT_EQ(layout.coord(dp[d]), (RankCoord{d, me.pcp, me.tp})) << what;
      // PCP: same dp and tp coordinates, one member per pcp index.
      std::vector<int> pcp = layout.pcp_group(rank);
      for (int p = 0; p < config.pcp; ++p) EXPECT_EQ(layout.coord(pcp[p]), (RankCoord{me.dp, p, me.tp})) << what;
      // EP: same pcp index; consecutive in the EP index dp_rank * tp + tp_rank.
      std::vector<int> ep = layout.ep_group(rank);
      for (int i = 0; i < config.ep; ++i) {
        RankCoord c = layout.coord(ep[i]);
        EXPECT_EQ(c.pcp, me.pcp) << what;
        int first = layout.coord(ep[0]).dp * config.tp + layout.coord(ep[0]).tp;
        EXPECT_EQ(c.dp * config.tp + c.tp, first + i) << what;
      }
      if (config.ep == config.tp) {
        EXPECT_EQ(ep, tp) << what;
      }
      if (config.dcp == config.tp) {
        EXPECT_EQ(dcp, tp) << what;
      }
    }
  }
}

TEST(RankLayout, MatchesTheHeaderTable) {
  RankLayout layout({.dp = 2, .tp = 4, .dcp = 2, .ep = 4});
  using Groups = std::vector<std::vector<int>>;
  EXPECT_EQ(layout.groups(GroupKind::kTp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(layout.groups(GroupKind::kDcp), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(layout.groups(GroupKind::kDp), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(layout.groups(GroupKind::kPcp), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(layout.groups(GroupKind::kEp), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  RankLayout full_ep({.dp = 2, .tp = 4, .dcp = 2, .ep = 8});
  EXPECT_EQ(full_ep.groups(GroupKind::kEp), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  // pcp sits between dp and tp: rank = (dp_rank * pcp + pcp_rank) * tp + tp_rank.
  RankLayout with_pcp({.dp = 2, .tp = 2, .pcp = 2, .ep = 4});
  EXPECT_EQ(with_pcp.coord(6), (RankCoord{1, 1, 0}));
  EXPECT_EQ(with_pcp.groups(GroupKind::kPcp), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(with_pcp.groups(GroupKind::kEp), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
}

void expect_rejected(const ParallelConfig& config, const std::string& message) {
  try {
    config.validate();
    ADD_FAILURE() << "accepted " << describe(config);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
  EXPECT_THROW(RankLayout{config}, Error) << describe(config);
}

TEST(ParallelConfig, ValidateRejectsBadConfigs) {
  EXPECT_NO_THROW(ParallelConfig{}.validate());
  EXPECT_EQ(ParallelConfig{}.world_size(), 1);
  expect_rejected({.dp = 0}, "parallel sizes must be >= 1, got dp=0 tp=1");
  expect_rejected({.tp = -2}, "tp=-2");
  expect_rejected({.pcp = 0}, "pcp=0");
  expect_rejected({.tp = 2, .dcp = 0}, "dcp=0");
  expect_rejected({.tp = 2, .ep = 0}, "ep=0");
  expect_rejected({.tp = 4, .dcp = 3}, "dcp (3) must divide tp (4)");
  expect_rejected({.tp = 2, .dcp = 4}, "dcp (4) must divide tp (2)");
  expect_rejected({.dp = 2, .tp = 2, .ep = 3}, "ep (3) must divide dp * tp (2 * 2 = 4)");
  expect_rejected({.dp = 1, .tp = 2, .pcp = 2, .ep = 4}, "ep (4) must divide dp * tp (1 * 2 = 2)");
}

TEST(RankLayout, OutOfRangeRanksAreRejected) {
  RankLayout layout({.dp = 2, .tp = 2});
  EXPECT_THROW(layout.coord(4), Error);
  EXPECT_THROW(layout.coord(-1), Error);
  EXPECT_THROW(layout.tp_group(4), Error);
  EXPECT_THROW(layout.rank({.dp = 2}), Error);
}

}  // namespace
}  // namespace tachyon::dist
