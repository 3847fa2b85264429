// Transfers over caches split into block pools (see pooled_kv_rows.h).
#include "tachyon/runner/pooled_kv_rows.h"

#include "tachyon/base/check.h"

namespace tachyon::runner {

PooledKvRowAccess::PooledKvRowAccess(std::vector<std::unique_ptr<KvRowAccess>> replicas, int32_t blocks_per_pool)
    : replicas_(std::move(replicas)), blocks_per_pool_(blocks_per_pool), scattered_tokens_(replicas_.size(), 0) {
  TACHYON_CHECK(!replicas_.empty() && blocks_per_pool_ > 0) << "internal: pooled KV rows need a pool";
  for (const std::unique_ptr<KvRowAccess>& replica : replicas_) {
    TACHYON_CHECK(replica->plane_widths() == replicas_.front()->plane_widths())
        << "internal: the replicas' caches hold different planes";
  }
}

size_t PooledKvRowAccess::local_table(std::span<const int32_t> block_table, std::vector<int32_t>& local) const {
  const int32_t pool = block_table.empty() ? 0 : block_table.front() / blocks_per_pool_;
  TACHYON_CHECK(pool >= 0 && pool < static_cast<int32_t>(replicas_.size()))
      << "KV block " << block_table.front() << " outside the " << replicas_.size() << " pools";
  local.clear();
  for (int32_t block : block_table) {
    TACHYON_CHECK(block / blocks_per_pool_ == pool) << "a block table spans KV pools " << pool << " and "
                                                    << block / blocks_per_pool_;
    local.push_back(block - pool * blocks_per_pool_);
  }
  return static_cast<size_t>(pool);
}

void PooledKvRowAccess::gather(std::span<const int32_t> block_table, int64_t num_tokens,
                               std::span<float> out) const {
  std::vector<int32_t> local;
  const size_t pool = local_table(block_table, local);
  replicas_[pool]->gather(local, num_tokens, out);
}

void PooledKvRowAccess::scatter(std::span<const int32_t> block_table, int64_t num_tokens,
                                std::span<const float> rows) {
  std::vector<int32_t> local;
  const size_t pool = local_table(block_table, local);
  replicas_[pool]->scatter(local, num_tokens, rows);
  scattered_tokens_[pool] += num_tokens;
}

}  // namespace tachyon::runner
