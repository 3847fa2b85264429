// DcpKvRowAccess: the KvRowAccess (runner/model_runner.h) of tensor-parallel ranks under decode
// context parallelism (--dcp N): each rank of a DCP group caches whole latent rows of the tokens
// its DcpLayout deals it (model/dcp_layout.h), in a paged cache of block size B / N under the
// engine's block table, and the tp / N groups hold the same tokens. A transfer moves whole rows,
// every token in order, as one rank without DCP caches them (runner/kv_export.h layout): gather
// takes each token from its owner in the first group, scatter writes every rank the tokens it
// owns. So a prefill or decode server with --dcp exchanges the KV with servers of any layout.
// Test: tests/unit/test_dcp_kv_rows.cpp, tests/server/pd_tensor_parallel.py.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/model/dcp_layout.h"
#include "tachyon/runner/kv_export.h"

namespace tachyon::runner {

class DcpKvRowAccess : public KvRowAccess {
 public:
  // caches[r]: TP rank r's cache (block size B / dcp.size), rank r being rank r % dcp.size of its
  // DCP group; the caches' count a multiple of dcp.size, every one with the same planes (checked).
  DcpKvRowAccess(const std::vector<PagedKvCache*>& caches, model::DcpOptions dcp);
  int64_t values_per_token() const override { return ranks_.front().values_per_token(); }
  std::vector<int64_t> plane_widths() const override { return ranks_.front().plane_widths(); }
  void gather(std::span<const int32_t> block_table, int64_t num_tokens, std::span<float> out) const override;
  void scatter(std::span<const int32_t> block_table, int64_t num_tokens, std::span<const float> rows) override;

 private:
  // Calls copy(rank offset, full offset, values) for each of rank r's tokens among [0, num_tokens)
  // on every plane: where its row lies in the rank's rows ([planes][its tokens][width], its
  // tokens in their order) and in the full rows ([planes][num_tokens][width]).
  template <typename Copy>
  void for_each_token(size_t r, int64_t num_tokens, const Copy& copy) const;
  model::DcpLayout layout(size_t r) const;

  std::vector<PagedKvRowAccess> ranks_;
  model::DcpOptions dcp_;
};

}  // namespace tachyon::runner
