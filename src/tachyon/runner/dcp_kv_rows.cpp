// Transfers over caches split by token under decode context parallelism (see dcp_kv_rows.h).
#include "tachyon/runner/dcp_kv_rows.h"

#include <algorithm>

#include "tachyon/base/check.h"

namespace tachyon::runner {

DcpKvRowAccess::DcpKvRowAccess(const std::vector<PagedKvCache*>& caches, model::DcpOptions dcp) : dcp_(dcp) {
  TACHYON_CHECK(dcp_.size >= 1 && dcp_.interleave >= 1 && !caches.empty() && caches.size() % dcp_.size == 0)
      << "internal: DCP KV rows need whole DCP groups of caches";
  for (PagedKvCache* cache : caches) ranks_.emplace_back(*cache);
  for (const PagedKvRowAccess& rank : ranks_) {
    TACHYON_CHECK(rank.plane_widths() == ranks_.front().plane_widths())
        << "internal: the DCP ranks' caches hold different planes";
  }
}

model::DcpLayout DcpKvRowAccess::layout(size_t r) const {
  return {.size = dcp_.size, .rank = static_cast<int>(r) % dcp_.size, .interleave = dcp_.interleave};
}

template <typename Copy>
void DcpKvRowAccess::for_each_token(size_t r, int64_t num_tokens, const Copy& copy) const {
  const model::DcpLayout owner = layout(r);
  const int64_t local_tokens = owner.local_count(num_tokens);
  int64_t rank_plane = 0, full_plane = 0;  // where the plane starts in the rank's rows and the full rows
  for (int64_t width : ranks_.front().plane_widths()) {
    for (int64_t k = 0; k < local_tokens; ++k) {
      copy(rank_plane + k * width, full_plane + owner.global_position(k) * width, width);
    }
    rank_plane += local_tokens * width;
    full_plane += num_tokens * width;
  }
}

void DcpKvRowAccess::gather(std::span<const int32_t> block_table, int64_t num_tokens, std::span<float> out) const {
  check_row_buffer(*this, num_tokens, out.size());
  for (size_t r = 0; r < static_cast<size_t>(dcp_.size); ++r) {  // the first group holds every token once
    const int64_t local_tokens = layout(r).local_count(num_tokens);
    std::vector<float> rank_rows(static_cast<size_t>(local_tokens * values_per_token()));
    ranks_[r].gather(block_table, local_tokens, rank_rows);
    for_each_token(r, num_tokens, [&](int64_t rank_at, int64_t full_at, int64_t count) {
      std::copy_n(rank_rows.begin() + rank_at, count, out.begin() + full_at);
    });
  }
}

void DcpKvRowAccess::scatter(std::span<const int32_t> block_table, int64_t num_tokens,
                             std::span<const float> rows) {
  check_row_buffer(*this, num_tokens, rows.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const int64_t local_tokens = layout(r).local_count(num_tokens);
    std::vector<float> rank_rows(static_cast<size_t>(local_tokens * values_per_token()));
    for_each_token(r, num_tokens, [&](int64_t rank_at, int64_t full_at, int64_t count) {
      std::copy_n(rows.begin() + full_at, count, rank_rows.begin() + rank_at);
    });
    ranks_[r].scatter(block_table, local_tokens, rank_rows);
  }
}

}  // namespace tachyon::runner
