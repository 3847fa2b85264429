#include "tachyon/runner/kv_export.h"

#include <algorithm>

#include "tachyon/base/check.h"

namespace tachyon::runner {

void check_row_buffer(const KvRowAccess& rows, int64_t num_tokens, size_t values) {
  TACHYON_CHECK(static_cast<int64_t>(values) == num_tokens * rows.values_per_token())
      << "a KV row buffer of " << values << " values for " << num_tokens << " tokens of " << rows.values_per_token();
}

PagedKvRowAccess::PagedKvRowAccess(PagedKvCache& cache) : cache_(cache) {}

// Every non-empty plane in a fixed order: both sides of a transfer list them the same way for
// the same model (a GLM-5 "shared" layer holds no index-key plane on either side).
std::vector<PagedKvRowAccess::Plane> PagedKvRowAccess::planes() const {
  std::vector<Plane> out;
  for (size_t layer = 0; layer < cache_.keys.size(); ++layer) {
    out.push_back({&cache_.keys[layer], cache_.kv_size});
    out.push_back({&cache_.values[layer], cache_.v_size});
  }
  for (auto& latent : cache_.latents) out.push_back({&latent, cache_.latent_size});
  for (auto& index_keys : cache_.index_keys) {
    if (!index_keys.empty()) out.push_back({&index_keys, cache_.index_key_size});
  }
  return out;
}

int64_t PagedKvRowAccess::values_per_token() const {
  int64_t total = 0;
  for (const Plane& plane : planes()) total += plane.width;
  return total;
}

std::vector<int64_t> PagedKvRowAccess::plane_widths() const {
  std::vector<int64_t> widths;
  for (const Plane& plane : planes()) widths.push_back(plane.width);
  return widths;
}

void PagedKvRowAccess::check_span(std::span<const int32_t> block_table, int64_t num_tokens, size_t values) const {
  TACHYON_CHECK(num_tokens >= 0 && static_cast<int64_t>(block_table.size()) * cache_.block_size >= num_tokens)
      << "a block table of " << block_table.size() << " blocks of " << cache_.block_size << " cannot hold "
      << num_tokens << " tokens";
  for (int32_t block : block_table) {
    TACHYON_CHECK(block >= 0 && block < cache_.num_blocks) << "KV block " << block << " outside the cache";
  }
  check_row_buffer(*this, num_tokens, values);
}

void PagedKvRowAccess::gather(std::span<const int32_t> block_table, int64_t num_tokens, std::span<float> out) const {
  check_span(block_table, num_tokens, out.size());
  float* dst = out.data();
  for (const Plane& plane : planes()) {
    for (int64_t t = 0; t < num_tokens; ++t) {
      const int64_t slot = static_cast<int64_t>(block_table[static_cast<size_t>(t / cache_.block_size)]) *
                               cache_.block_size + t % cache_.block_size;
      const float* src = plane.data->data() + slot * plane.width;
      dst = std::copy(src, src + plane.width, dst);
    }
  }
}

void PagedKvRowAccess::scatter(std::span<const int32_t> block_table, int64_t num_tokens, std::span<const float> rows) {
  check_span(block_table, num_tokens, rows.size());
  const float* src = rows.data();
  for (const Plane& plane : planes()) {
    for (int64_t t = 0; t < num_tokens; ++t) {
      const int64_t slot = static_cast<int64_t>(block_table[static_cast<size_t>(t / cache_.block_size)]) *
                               cache_.block_size + t % cache_.block_size;
      std::copy(src, src + plane.width, plane.data->data() + slot * plane.width);
      src += plane.width;
    }
  }
}

KvRowAccess::HostLayout PagedKvRowAccess::host_layout() {
  HostLayout layout;
  layout.block_size = cache_.block_size;
  for (const Plane& plane : planes()) {
    layout.planes.push_back({plane.data->data(), static_cast<int64_t>(plane.data->size()) / plane.width, plane.width});
  }
  return layout;
}

}  // namespace tachyon::runner
