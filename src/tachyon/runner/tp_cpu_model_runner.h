// TpCpuModelRunner: tensor parallelism on CPU thread ranks (--tp N --device cpu). It owns a
// dist::CpuWorld(N) and N worker threads; rank r holds a TpDenseModel of its shard, its own
// PagedKvCache built from the rank's config (its kv heads only) and a CpuCommunicator.
// execute(plan) hands the same StepPlan to every worker (generation counter + condition
// variable), each runs its forward through a PagedAttentionBackend over its cache, and every
// rank ends with the full logits; rank 0's are sampled on the calling (engine) thread with the
// CPU runner's sampling (sample_plan_rows), so tokens match CpuModelRunner's up to f32 rounding.
// A worker's exception is captured and rethrown on the engine thread. Caveat: an error raised on
// one rank outside a collective leaves the others waiting inside the next collective; the
// CpuCommunicator's own argument errors are raised on all ranks together and are safe.
// Tests: tests/unit/test_tp_engine.cpp.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tachyon/dist/cpu_communicator.h"
#include "tachyon/model/tp_dense_model.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/paged_attention_backend.h"

namespace tachyon::runner {

class TpCpuModelRunner : public ModelRunner {
 public:
  // Shards `full` (f32) over tp_size >= 2 ranks (checked with model::check_tp_size first).
  TpCpuModelRunner(const model::ModelWeights& full, int tp_size, int32_t num_blocks, int32_t block_size);
  ~TpCpuModelRunner() override;
  TpCpuModelRunner(const TpCpuModelRunner&) = delete;
  TpCpuModelRunner& operator=(const TpCpuModelRunner&) = delete;

  std::vector<engine::SampledToken> execute(const engine::StepPlan& plan) override;
  int64_t vocab_size() const override { return vocab_size_; }
  int tp_size() const { return world_.size(); }

 private:
  struct Rank {
    Rank(dist::CpuWorld& world, int rank, model::TpShard shard, int32_t num_blocks, int32_t block_size);
    dist::CpuCommunicator comm;
    model::TpDenseModel model;
    PagedKvCache cache;
    std::vector<float> logits;  // the last step's full logits
    std::exception_ptr error;   // the last step's exception, if any
  };
  void worker(int rank);

  int64_t vocab_size_;
  dist::CpuWorld world_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<std::thread> threads_;

  std::mutex mutex_;
  std::condition_variable work_cv_;  // engine -> workers: a new generation or stop
  std::condition_variable done_cv_;  // workers -> engine: one more rank finished
  const engine::StepPlan* plan_ = nullptr;
  uint64_t generation_ = 0;
  int done_ = 0;
  bool stop_ = false;
};

}  // namespace tachyon::runner
