// DcpKvRowAccess (runner/dcp_kv_rows.h): the rows of ranks under decode context parallelism,
// which each cache the latent rows of the tokens their DcpLayout deals them, are the rows one rank
// without DCP caches. Rows gathered from a one-rank cache and scattered into 4 TP ranks of 2 DCP
// groups land as each rank's own tokens, in its local order (interleave 1 and 2, a length that
// ends inside a run), and gathered back they are the same rows bit for bit.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tachyon/model/make_model.h"
#include "tachyon/runner/dcp_kv_rows.h"

namespace tachyon::runner {
namespace {

constexpr int32_t kBlocks = 6, kBlockSize = 8;
constexpr int64_t kTokens = 19;

void expect_ranks_hold_their_tokens(const model::ModelConfig& config, model::DcpOptions dcp, int tp) {
  SCOPED_TRACE(testing::Message() << "tp " << tp << ", dcp " << dcp.size << ", interleave " << dcp.interleave);
  PagedKvCache single(config, kBlocks, kBlockSize);
  PagedKvRowAccess single_rows(single);
  std::vector<float> rows(static_cast<size_t>(kTokens * single_rows.values_per_token()));
  std::iota(rows.begin(), rows.end(), 1.0f);  // every value tells where it came from

  std::vector<PagedKvCache> caches;
  caches.reserve(static_cast<size_t>(tp));
  std::vector<PagedKvCache*> cache_ptrs;
  for (int r = 0; r < tp; ++r) {
    caches.emplace_back(config, kBlocks, kBlockSize / dcp.size);
    cache_ptrs.push_back(&caches.back());
  }
  DcpKvRowAccess split(cache_ptrs, dcp);
  EXPECT_EQ(split.plane_widths(), single_rows.plane_widths());
  const std::vector<int32_t> table = {4, 1, 5};
  split.scatter(table, kTokens, rows);

  const std::vector<int64_t> widths = single_rows.plane_widths();
  for (int r = 0; r < tp; ++r) {
    const model::DcpLayout layout{.size = dcp.size, .rank = r % dcp.size, .interleave = dcp.interleave};
    std::vector<float> want;
    int64_t plane = 0;
    for (int64_t width : widths) {
      for (int64_t p = 0; p < kTokens; ++p) {  // the rank's tokens in global order are its local order
        if (!layout.owns(p)) continue;
        const float* row = rows.data() + plane + p * width;
        want.insert(want.end(), row, row + width);
      }
      plane += kTokens * width;
    }
    PagedKvRowAccess rank_rows(caches[static_cast<size_t>(r)]);
    std::vector<float> got(want.size());
    rank_rows.gather(table, layout.local_count(kTokens), got);
    EXPECT_EQ(got, want) << "rank " << r << " must hold its tokens' rows";
  }
  std::vector<float> back(rows.size(), -1.0f);
  split.gather(table, kTokens, back);
  EXPECT_EQ(back, rows) << "the ranks' tokens gathered back must be the rows they were given";
}

TEST(DcpKvRows, RanksHoldTheirTokensAndGiveBackTheFullRows) {
  const model::ModelConfig config = model::make_model_config({.arch = "deepseek_v3", .preset = "tiny-deepseek"});
  expect_ranks_hold_their_tokens(config, {.size = 2, .interleave = 1}, 4);
  expect_ranks_hold_their_tokens(config, {.size = 2, .interleave = 2}, 4);
  expect_ranks_hold_their_tokens(config, {.size = 4, .interleave = 1}, 4);
}

}  // namespace
}  // namespace tachyon::runner
