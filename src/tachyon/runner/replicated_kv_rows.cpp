// Transfers over caches that hold the same rows (see replicated_kv_rows.h).
#include "tachyon/runner/replicated_kv_rows.h"

#include "tachyon/base/check.h"

namespace tachyon::runner {

ReplicatedKvRowAccess::ReplicatedKvRowAccess(const std::vector<PagedKvCache*>& caches) {
  TACHYON_CHECK(!caches.empty()) << "internal: replicated KV rows need a cache";
  for (PagedKvCache* cache : caches) replicas_.emplace_back(*cache);
  for (const PagedKvRowAccess& replica : replicas_) {
    TACHYON_CHECK(replica.plane_widths() == replicas_.front().plane_widths())
        << "internal: replicated KV caches hold different planes";
  }
}

void ReplicatedKvRowAccess::gather(std::span<const int32_t> block_table, int64_t num_tokens,
                                   std::span<float> out) const {
  replicas_.front().gather(block_table, num_tokens, out);
}

void ReplicatedKvRowAccess::scatter(std::span<const int32_t> block_table, int64_t num_tokens,
                                    std::span<const float> rows) {
  for (PagedKvRowAccess& replica : replicas_) replica.scatter(block_table, num_tokens, rows);
}

}  // namespace tachyon::runner
