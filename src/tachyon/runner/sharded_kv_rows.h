// ShardedKvRowAccess: the KvRowAccess (runner/model_runner.h) of caches that each hold some of
// every plane's heads, as the tensor-parallel CPU ranks of a dense-attention model do (rank r
// caches K/V heads [begin_r, begin_r + heads_per_rank): its shard, model/tp_shard.h; with more
// ranks than K/V heads, ranks share a head). A transfer moves whole rows, every head in order, as
// one rank of the full model caches them (runner/kv_export.h layout): gather takes each head from
// the first rank that holds it, scatter writes every rank its heads. So a prefill server of N ranks
// and a decode server of M ranks (one, or several) exchange a dense model's KV.
// Test: tests/unit/test_sharded_kv_rows.cpp, tests/server/pd_tensor_parallel.py.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/runner/kv_export.h"

namespace tachyon::runner {

class ShardedKvRowAccess : public KvRowAccess {
 public:
  // caches[r]: rank r's cache, every one with the same planes of heads_per_rank heads each;
  // head_begin[r]: the first of the num_heads full-model heads rank r holds. Every head must be
  // held by some rank (checked).
  ShardedKvRowAccess(const std::vector<PagedKvCache*>& caches, std::vector<int64_t> head_begin, int64_t num_heads);
  int64_t values_per_token() const override;
  std::vector<int64_t> plane_widths() const override;
  void gather(std::span<const int32_t> block_table, int64_t num_tokens, std::span<float> out) const override;
  void scatter(std::span<const int32_t> block_table, int64_t num_tokens, std::span<const float> rows) override;

 private:
  // Calls copy(head, rank offset, full offset, values) for every head rank r holds, on every plane
  // and token: where its values lie in the rank's rows ([planes][num_tokens][rank width]) and in
  // the full rows ([planes][num_tokens][width]).
  template <typename Copy>
  void for_each_head(size_t r, int64_t num_tokens, const Copy& copy) const;

  std::vector<PagedKvRowAccess> ranks_;
  std::vector<int64_t> head_begin_;
  int64_t num_heads_ = 0, heads_per_rank_ = 0;
  std::vector<int64_t> rank_widths_;  // each plane's width on a rank
  std::vector<int> owner_;            // [num_heads] the first rank holding each head
};

}  // namespace tachyon::runner
