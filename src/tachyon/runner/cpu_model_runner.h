// CpuModelRunner: the reference runner. Runs the dense model's forward over the plan's ragged
// batch with the paged KV cache, then samples each `sample` sequence's rows with the CPU sampler,
// verifying its draft tokens (runner/plan_sampling.h). Synchronous: launch() computes the step.
// A plan with return_hidden_states gets every row's last hidden state before the final norm
// (StepOutput::hidden_states, from the forward's "final_hidden" hook), which an MTP drafter reads.
// Its kernels use the thread count of cpu_threads.h (one thread for a small model).
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "tachyon/model/dense_model.h"
#include "tachyon/runner/kv_export.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/paged_attention_backend.h"

namespace tachyon::runner {

class CpuModelRunner : public SynchronousModelRunner {
 public:
  // `model` must outlive the runner. `mla_form` is the form an MLA model's cache holds (serving's
  // absorbed form unless a test compares it with the decompressed one); dense models ignore it.
  // `fp8_kv_cache`: the cache holds FP8 rows (--kv-cache-dtype fp8, paged_attention_backend.h).
  CpuModelRunner(const model::DenseModel& model, int32_t num_blocks, int32_t block_size,
                 model::MlaAttentionForm mla_form = model::MlaAttentionForm::kAbsorbed, bool fp8_kv_cache = false);
  // The same, owning the model.
  CpuModelRunner(std::unique_ptr<model::DenseModel> model, int32_t num_blocks, int32_t block_size,
                 model::MlaAttentionForm mla_form = model::MlaAttentionForm::kAbsorbed, bool fp8_kv_cache = false);
  int64_t vocab_size() const override { return model_.config().vocab_size; }
  KvRowAccess* kv_rows() override { return &rows_; }
  // Every token's hidden state after the final norm for one token sequence, [tokens, hidden]
  // (DenseModel::final_hidden_states): what /v1/embeddings pools. Any thread may call it; it
  // runs between steps (never beside one: both use the OpenMP team) and touches no KV block.
  std::vector<float> final_hidden_states(std::span<const int32_t> tokens);

 protected:
  core::StepOutput run(const core::StepPlan& plan) override;

 private:
  std::unique_ptr<model::DenseModel> owned_;  // set by the owning constructor
  const model::DenseModel& model_;
  PagedKvCache cache_;
  PagedKvRowAccess rows_{cache_};  // after cache_, which it views
  int threads_ = 0;  // the forward's OpenMP threads (cpu_threads.h); 0: OpenMP's choice
  std::mutex forward_mutex_;  // one forward at a time: a step's or an embedding request's
  // The last step's logits, handed back to the next forward for their allocation (under the mutex).
  std::vector<float> logits_;
};

}  // namespace tachyon::runner
