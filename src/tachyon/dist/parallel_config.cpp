// ParallelConfig validation and the rank layout; see the header for the table.
#include "tachyon/dist/parallel_config.h"

#include "tachyon/base/check.h"

namespace tachyon::dist {

void ParallelConfig::validate() const {
  TACHYON_CHECK(dp >= 1 && tp >= 1 && pcp >= 1 && dcp >= 1 && ep >= 1)
      << "parallel sizes must be >= 1, got dp=" << dp << " tp=" << tp << " pcp=" << pcp << " dcp=" << dcp
      << " ep=" << ep;
  TACHYON_CHECK(tp % dcp == 0) << "dcp (" << dcp << ") must divide tp (" << tp
                               << "): decode context parallelism splits the KV cache inside a TP group";
  TACHYON_CHECK((dp * tp) % ep == 0) << "ep (" << ep << ") must divide dp * tp (" << dp << " * " << tp << " = "
                                     << dp * tp << "): expert groups are drawn from the DP x TP ranks";
}

std::string_view group_kind_name(GroupKind kind) {
  switch (kind) {
    case GroupKind::kTp: return "tp";
    case GroupKind::kDp: return "dp";
    case GroupKind::kPcp: return "pcp";
    case GroupKind::kDcp: return "dcp";
    case GroupKind::kEp: return "ep";
  }
  TACHYON_FAIL() << "unknown GroupKind " << static_cast<int>(kind);
}

RankLayout::RankLayout(const ParallelConfig& config) : config_(config) { config_.validate(); }

void RankLayout::check_rank(int rank) const {
  TACHYON_CHECK(rank >= 0 && rank < world_size()) << "rank " << rank << " is outside a world of " << world_size();
}

RankCoord RankLayout::coord(int rank) const {
  check_rank(rank);
  int slice = rank / config_.tp;  // dp_rank * pcp + pcp_rank
  return {.dp = slice / config_.pcp, .pcp = slice % config_.pcp, .tp = rank % config_.tp};
}

int RankLayout::rank(RankCoord c) const {
  TACHYON_CHECK(c.dp >= 0 && c.dp < config_.dp && c.pcp >= 0 && c.pcp < config_.pcp && c.tp >= 0 && c.tp < config_.tp)
      << "rank coordinates (dp " << c.dp << ", pcp " << c.pcp << ", tp " << c.tp << ") are outside dp=" << config_.dp
      << " pcp=" << config_.pcp << " tp=" << config_.tp;
  return (c.dp * config_.pcp + c.pcp) * config_.tp + c.tp;
}

int RankLayout::group_index(GroupKind kind, int rank) const {
  RankCoord c = coord(rank);
  const ParallelConfig& p = config_;
  switch (kind) {
    case GroupKind::kTp: return rank / p.tp;
    case GroupKind::kDcp: return rank / p.dcp;  // dcp divides tp: blocks never straddle TP groups
    case GroupKind::kDp: return c.pcp * p.tp + c.tp;
    case GroupKind::kPcp: return c.dp * p.tp + c.tp;
    case GroupKind::kEp: return c.pcp * (p.dp * p.tp / p.ep) + (c.dp * p.tp + c.tp) / p.ep;
  }
  TACHYON_FAIL() << "unknown GroupKind " << static_cast<int>(kind);
}

std::vector<int> RankLayout::group(GroupKind kind, int rank) const {
  RankCoord c = coord(rank);
  const ParallelConfig& p = config_;
  std::vector<int> members;
  switch (kind) {
    case GroupKind::kTp:
    case GroupKind::kDcp: {
      int size = kind == GroupKind::kTp ? p.tp : p.dcp;
      for (int i = 0; i < size; ++i) members.push_back(rank / size * size + i);
      break;
    }
    case GroupKind::kDp:
      for (int d = 0; d < p.dp; ++d) members.push_back(this->rank({.dp = d, .pcp = c.pcp, .tp = c.tp}));
      break;
    case GroupKind::kPcp:
      for (int q = 0; q < p.pcp; ++q) members.push_back(this->rank({.dp = c.dp, .pcp = q, .tp = c.tp}));
      break;
    case GroupKind::kEp: {
      int first = (c.dp * p.tp + c.tp) / p.ep * p.ep;  // EP index = dp_rank * tp + tp_rank
      for (int e = first; e < first + p.ep; ++e)
        members.push_back(this->rank({.dp = e / p.tp, .pcp = c.pcp, .tp = e % p.tp}));
      break;
    }
  }
  return members;
}

std::vector<std::vector<int>> RankLayout::groups(GroupKind kind) const {
  std::vector<std::vector<int>> result;
  for (int rank = 0; rank < world_size(); ++rank) {
    size_t index = group_index(kind, rank);
    if (result.size() <= index) result.resize(index + 1);
    result[index].push_back(rank);
  }
  return result;
}

}  // namespace tachyon::dist
