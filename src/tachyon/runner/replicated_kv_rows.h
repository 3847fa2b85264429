// ReplicatedKvRowAccess: the KvRowAccess (runner/model_runner.h) of replicas that hold the same rows:
// the tensor-parallel CPU ranks of a latent-attention model (each rank caches every token's whole
// latent row and index key: runner/tp_cpu_model_runner.h), or the TP groups of prefill context
// parallelism (each group caches every token: runner/pcp_cpu_model_runner.h). A transfer reads the
// first replica's rows and writes every replica, so the rows move as one rank's
// (runner/kv_export.h layout), and servers of different layouts exchange them.
// Test: tests/server/pd_tensor_parallel.py.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tachyon/runner/kv_export.h"

namespace tachyon::runner {

class ReplicatedKvRowAccess : public KvRowAccess {
 public:
  // caches: at least one, every one with the same planes (checked).
  explicit ReplicatedKvRowAccess(const std::vector<PagedKvCache*>& caches);
  // replicas: at least one row access, every one with the same planes (checked).
  explicit ReplicatedKvRowAccess(std::vector<std::unique_ptr<KvRowAccess>> replicas);
  int64_t values_per_token() const override { return replicas_.front()->values_per_token(); }
  std::vector<int64_t> plane_widths() const override { return replicas_.front()->plane_widths(); }
  void gather(std::span<const int32_t> block_table, int64_t num_tokens, std::span<float> out) const override;
  void scatter(std::span<const int32_t> block_table, int64_t num_tokens, std::span<const float> rows) override;

 private:
  std::vector<std::unique_ptr<KvRowAccess>> replicas_;
};

}  // namespace tachyon::runner
