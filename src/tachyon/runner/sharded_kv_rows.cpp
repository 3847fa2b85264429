// Transfers over caches that split each plane's heads (see sharded_kv_rows.h).
#include "tachyon/runner/sharded_kv_rows.h"

#include <algorithm>

#include "tachyon/base/check.h"

namespace tachyon::runner {

ShardedKvRowAccess::ShardedKvRowAccess(const std::vector<PagedKvCache*>& caches, std::vector<int64_t> head_begin,
                                       int64_t num_heads)
    : head_begin_(std::move(head_begin)), num_heads_(num_heads) {
  TACHYON_CHECK(!caches.empty() && caches.size() == head_begin_.size() && num_heads_ >= 1)
      << "internal: sharded KV rows need one first head per cache";
  for (PagedKvCache* cache : caches) ranks_.emplace_back(*cache);
  rank_widths_ = ranks_.front().plane_widths();
  for (const PagedKvRowAccess& rank : ranks_) {
    TACHYON_CHECK(rank.plane_widths() == rank_widths_) << "internal: sharded KV caches hold different planes";
  }
  heads_per_rank_ = std::max<int64_t>(num_heads_ / static_cast<int64_t>(ranks_.size()), 1);
  for (int64_t width : rank_widths_) {
    TACHYON_CHECK(width % heads_per_rank_ == 0)
        << "internal: a plane of width " << width << " does not hold " << heads_per_rank_ << " heads";
  }
  owner_.assign(static_cast<size_t>(num_heads_), -1);
  for (size_t r = 0; r < ranks_.size(); ++r) {
    TACHYON_CHECK(head_begin_[r] >= 0 && head_begin_[r] + heads_per_rank_ <= num_heads_)
        << "internal: rank " << r << "'s heads fall outside the model's " << num_heads_;
    for (int64_t h = head_begin_[r]; h < head_begin_[r] + heads_per_rank_; ++h) {
      if (owner_[static_cast<size_t>(h)] < 0) owner_[static_cast<size_t>(h)] = static_cast<int>(r);
    }
  }
  TACHYON_CHECK(std::find(owner_.begin(), owner_.end(), -1) == owner_.end())
      << "internal: some K/V head is held by no rank";
}

std::vector<int64_t> ShardedKvRowAccess::plane_widths() const {
  std::vector<int64_t> widths;
  for (int64_t width : rank_widths_) widths.push_back(width / heads_per_rank_ * num_heads_);
  return widths;
}

int64_t ShardedKvRowAccess::values_per_token() const {
  int64_t total = 0;
  for (int64_t width : plane_widths()) total += width;
  return total;
}

template <typename Copy>
void ShardedKvRowAccess::for_each_head(size_t r, int64_t num_tokens, const Copy& copy) const {
  int64_t rank_plane = 0, full_plane = 0;  // where the plane starts in the rank's rows and the full rows
  for (int64_t rank_width : rank_widths_) {
    const int64_t head_width = rank_width / heads_per_rank_, width = head_width * num_heads_;
    for (int64_t t = 0; t < num_tokens; ++t) {
      for (int64_t h = 0; h < heads_per_rank_; ++h) {
        copy(head_begin_[r] + h, rank_plane + t * rank_width + h * head_width,
             full_plane + t * width + (head_begin_[r] + h) * head_width, head_width);
      }
    }
    rank_plane += num_tokens * rank_width;
    full_plane += num_tokens * width;
  }
}

void ShardedKvRowAccess::gather(std::span<const int32_t> block_table, int64_t num_tokens,
                                std::span<float> out) const {
  check_row_buffer(*this, num_tokens, out.size());
  std::vector<float> rank_rows(static_cast<size_t>(num_tokens * ranks_.front().values_per_token()));
  for (size_t r = 0; r < ranks_.size(); ++r) {
    ranks_[r].gather(block_table, num_tokens, rank_rows);
    for_each_head(r, num_tokens, [&](int64_t head, int64_t rank_at, int64_t full_at, int64_t count) {
      if (owner_[static_cast<size_t>(head)] != static_cast<int>(r)) return;  // its first holder gave it
      std::copy_n(rank_rows.begin() + rank_at, count, out.begin() + full_at);
    });
  }
}

void ShardedKvRowAccess::scatter(std::span<const int32_t> block_table, int64_t num_tokens,
                                 std::span<const float> rows) {
  check_row_buffer(*this, num_tokens, rows.size());
  std::vector<float> rank_rows(static_cast<size_t>(num_tokens * ranks_.front().values_per_token()));
  for (size_t r = 0; r < ranks_.size(); ++r) {
    for_each_head(r, num_tokens, [&](int64_t, int64_t rank_at, int64_t full_at, int64_t count) {
      std::copy_n(rows.begin() + full_at, count, rank_rows.begin() + rank_at);
    });
    ranks_[r].scatter(block_table, num_tokens, rank_rows);
  }
}

}  // namespace tachyon::runner
