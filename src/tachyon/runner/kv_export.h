// PagedKvRowAccess: the CPU runner's KvRowAccess (runner/model_runner.h), the host's view of its
// paged KV cache for prefill/decode disaggregation (engine/kv_transfer.h). A request's KV moves
// as token rows, not as blocks: every cache plane's row (per layer K and V, or the MLA latent, and each DSA index-key plane) for positions
// [0, num_tokens), gathered through the request's block table on the prefill side and scattered
// through a freshly allocated one on the decode side. Rows do not depend on the block size, so
// the two servers may page their caches differently.
// Layout of a row buffer: [plane][token][width] f32, planes in the cache's order (per layer K
// then V; or per layer the latent; then the index-key planes); values_per_token() sums the widths.
// Test: tests/unit/test_kv_transfer.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/paged_attention_backend.h"

namespace tachyon::runner {

// Throws Error unless a row buffer of `values` holds exactly num_tokens of `rows`' rows.
void check_row_buffer(const KvRowAccess& rows, int64_t num_tokens, size_t values);

// The CPU runner's paged cache (host memory: gather and scatter are copies).
class PagedKvRowAccess : public KvRowAccess {
 public:
  explicit PagedKvRowAccess(PagedKvCache& cache);
  int64_t values_per_token() const override;
  std::vector<int64_t> plane_widths() const override;
  void gather(std::span<const int32_t> block_table, int64_t num_tokens, std::span<float> out) const override;
  void scatter(std::span<const int32_t> block_table, int64_t num_tokens, std::span<const float> rows) override;
  HostLayout host_layout() override;

 private:
  struct Plane {
    std::vector<float>* data;  // [num_blocks * block_size, width]
    int64_t width;
  };
  std::vector<Plane> planes() const;
  void check_span(std::span<const int32_t> block_table, int64_t num_tokens, size_t values) const;

  PagedKvCache& cache_;
};

}  // namespace tachyon::runner
