// Transfers over caches that hold the same rows (see replicated_kv_rows.h).
#include "tachyon/runner/replicated_kv_rows.h"

#include "tachyon/base/check.h"

namespace tachyon::runner {

namespace {

std::vector<std::unique_ptr<KvRowAccess>> accesses(const std::vector<PagedKvCache*>& caches) {
  std::vector<std::unique_ptr<KvRowAccess>> out;
  for (PagedKvCache* cache : caches) out.push_back(std::make_unique<PagedKvRowAccess>(*cache));
  return out;
}

}  // namespace

ReplicatedKvRowAccess::ReplicatedKvRowAccess(const std::vector<PagedKvCache*>& caches)
    : ReplicatedKvRowAccess(accesses(caches)) {}

ReplicatedKvRowAccess::ReplicatedKvRowAccess(std::vector<std::unique_ptr<KvRowAccess>> replicas)
    : replicas_(std::move(replicas)) {
  TACHYON_CHECK(!replicas_.empty()) << "internal: replicated KV rows need a cache";
  for (const std::unique_ptr<KvRowAccess>& replica : replicas_) {
    TACHYON_CHECK(replica->plane_widths() == replicas_.front()->plane_widths())
        << "internal: replicated KV caches hold different planes";
  }
}

void ReplicatedKvRowAccess::gather(std::span<const int32_t> block_table, int64_t num_tokens,
                                   std::span<float> out) const {
  replicas_.front()->gather(block_table, num_tokens, out);
}

void ReplicatedKvRowAccess::scatter(std::span<const int32_t> block_table, int64_t num_tokens,
                                    std::span<const float> rows) {
  for (const std::unique_ptr<KvRowAccess>& replica : replicas_) replica->scatter(block_table, num_tokens, rows);
}

}  // namespace tachyon::runner
