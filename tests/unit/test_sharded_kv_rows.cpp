// ShardedKvRowAccess (runner/sharded_kv_rows.h): the rows of tensor-parallel ranks that each cache
// some K/V heads are the rows one rank of the full model caches. Rows gathered from a one-rank
// cache and scattered into the ranks' caches land as each rank's heads (split over 2 ranks, and
// shared by the ranks when there are more ranks than heads), and gathered back they are the same
// rows bit for bit, for every layer's K and V planes.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "tachyon/model/make_model.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/sharded_kv_rows.h"

namespace tachyon::runner {
namespace {

constexpr int32_t kBlocks = 4, kBlockSize = 4;
constexpr int64_t kTokens = 7;

void expect_ranks_hold_their_heads(const model::ModelConfig& full, int tp) {
  SCOPED_TRACE(testing::Message() << "tp " << tp << " over " << full.num_key_value_heads << " K/V heads");
  const int64_t kv = full.num_key_value_heads;
  PagedKvCache single(full, kBlocks, kBlockSize);
  PagedKvRowAccess single_rows(single);
  std::vector<float> rows(static_cast<size_t>(kTokens * single_rows.values_per_token()));
  std::iota(rows.begin(), rows.end(), 1.0f);  // every value tells where it came from
  const std::vector<int32_t> single_table = {2, 0};
  single_rows.scatter(single_table, kTokens, rows);

  const model::ModelConfig rank_config = model::tp_rank_config(full, tp);
  std::vector<PagedKvCache> caches;
  caches.reserve(static_cast<size_t>(tp));
  std::vector<PagedKvCache*> cache_ptrs;
  std::vector<int64_t> head_begin;
  for (int r = 0; r < tp; ++r) {
    caches.emplace_back(rank_config, kBlocks, kBlockSize);
    cache_ptrs.push_back(&caches.back());
    head_begin.push_back(r * kv / tp);  // model/tp_shard.cpp's kv_head_begin
  }
  ShardedKvRowAccess sharded(cache_ptrs, head_begin, kv);
  EXPECT_EQ(sharded.plane_widths(), single_rows.plane_widths());
  EXPECT_EQ(sharded.values_per_token(), single_rows.values_per_token());

  std::vector<float> transferred(rows.size());
  single_rows.gather(single_table, kTokens, transferred);
  const std::vector<int32_t> table = {1, 3};
  sharded.scatter(table, kTokens, transferred);

  // Each rank holds, in every plane, its heads' values of the full rows.
  const int64_t rank_heads = rank_config.num_key_value_heads;
  for (int r = 0; r < tp; ++r) {
    PagedKvRowAccess rank_rows(caches[static_cast<size_t>(r)]);
    std::vector<float> got(static_cast<size_t>(kTokens * rank_rows.values_per_token()));
    rank_rows.gather(table, kTokens, got);
    std::vector<float> want;
    const float* full_plane = transferred.data();
    for (int64_t width : single_rows.plane_widths()) {
      const int64_t head_width = width / kv;
      for (int64_t t = 0; t < kTokens; ++t) {
        const float* begin = full_plane + t * width + head_begin[static_cast<size_t>(r)] * head_width;
        want.insert(want.end(), begin, begin + rank_heads * head_width);
      }
      full_plane += kTokens * width;
    }
    EXPECT_EQ(got, want) << "rank " << r << " must hold its heads of the transferred rows";
  }
  std::vector<float> back(rows.size(), -1.0f);
  sharded.gather(table, kTokens, back);
  EXPECT_EQ(back, transferred) << "the ranks' heads gathered back must be the rows they were given";
}

TEST(ShardedKvRows, RanksHoldTheirHeadsAndGiveBackTheFullRows) {
  const model::ModelConfig full = model::make_model_config({.arch = "qwen3", .preset = "tiny"});
  ASSERT_GE(full.num_key_value_heads, 2);
  expect_ranks_hold_their_heads(full, 2);                                             // heads split
  expect_ranks_hold_their_heads(full, static_cast<int>(2 * full.num_key_value_heads));  // heads shared
}

}  // namespace
}  // namespace tachyon::runner
