#include "tachyon/runner/tp_kv_rows.h"

#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/dcp_kv_rows.h"
#include "tachyon/runner/replicated_kv_rows.h"
#include "tachyon/runner/sharded_kv_rows.h"

namespace tachyon::runner {

std::unique_ptr<KvRowAccess> make_tp_kv_rows(const std::vector<PagedKvCache*>& caches, const model::ModelConfig& full,
                                             model::DcpOptions dcp) {
  if (dcp.size > 1) return std::make_unique<DcpKvRowAccess>(caches, dcp);
  if (caches.size() == 1) return std::make_unique<PagedKvRowAccess>(*caches.front());  // the rows as they are
  if (!caches.front()->latents.empty()) return std::make_unique<ReplicatedKvRowAccess>(caches);
  std::vector<int64_t> head_begin;
  const int tp = static_cast<int>(caches.size());
  for (int r = 0; r < tp; ++r) head_begin.push_back(model::kv_head_begin(full, r, tp));
  return std::make_unique<ShardedKvRowAccess>(caches, std::move(head_begin), full.num_key_value_heads);
}

}  // namespace tachyon::runner
