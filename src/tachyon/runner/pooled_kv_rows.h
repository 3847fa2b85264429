// PooledKvRowAccess: the KvRowAccess (runner/model_runner.h) of caches split into block pools,
// one per data-parallel replica (runner/dp_cpu_model_runner.h: the engine's block ids
// [p * B, (p + 1) * B) are replica p's blocks 0..B-1). A block table lives in one pool
// (engine/kv_cache_manager.h), so a transfer is the pool's replica's transfer over the table's
// local ids; the rows are what one rank of the whole model caches, as every replica's access
// gives them (tp_kv_rows.h). Test: tests/server/pd_tensor_parallel.py.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tachyon/runner/model_runner.h"

namespace tachyon::runner {

class PooledKvRowAccess : public KvRowAccess {
 public:
  // replicas[p]: pool p's access over its own block ids; every one with the same planes (checked).
  PooledKvRowAccess(std::vector<std::unique_ptr<KvRowAccess>> replicas, int32_t blocks_per_pool);
  int64_t values_per_token() const override { return replicas_.front()->values_per_token(); }
  std::vector<int64_t> plane_widths() const override { return replicas_.front()->plane_widths(); }
  void gather(std::span<const int32_t> block_table, int64_t num_tokens, std::span<float> out) const override;
  void scatter(std::span<const int32_t> block_table, int64_t num_tokens, std::span<const float> rows) override;
  // Tokens scattered into each pool so far: where imported prompts went.
  const std::vector<int64_t>& scattered_tokens() const { return scattered_tokens_; }

 private:
  // The table's pool and its blocks' ids in that pool; Error if the table spans pools.
  size_t local_table(std::span<const int32_t> block_table, std::vector<int32_t>& local) const;

  std::vector<std::unique_ptr<KvRowAccess>> replicas_;
  int32_t blocks_per_pool_;
  std::vector<int64_t> scattered_tokens_;  // [pools]
};

}  // namespace tachyon::runner
