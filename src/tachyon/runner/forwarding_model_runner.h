// ForwardingModelRunner: a runner that hands every call to another one. The base of wrappers that
// change one behaviour and keep the rest: engine/runner_fault.h fails a chosen launch or wait,
// and tests give a runner other KV access (tests/unit/test_kv_by_reference.cpp).
#pragma once

#include <memory>
#include <utility>

#include "tachyon/base/check.h"
#include "tachyon/runner/model_runner.h"

namespace tachyon::runner {

class ForwardingModelRunner : public ModelRunner {
 public:
  explicit ForwardingModelRunner(std::unique_ptr<ModelRunner> inner) : inner_(std::move(inner)) {
    TACHYON_CHECK(inner_ != nullptr) << "internal: a forwarding runner needs a runner";
  }
  void launch(const core::StepPlan& plan) override { inner_->launch(plan); }
  core::StepOutput wait() override { return inner_->wait(); }
  bool takes_late_token_masks() const override { return inner_->takes_late_token_masks(); }
  void supply_token_masks(std::span<const core::AllowedTokens> masks) override { inner_->supply_token_masks(masks); }
  bool verifies_drafts() const override { return inner_->verifies_drafts(); }
  bool overlaps_steps() const override { return inner_->overlaps_steps(); }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  int32_t kv_cache_replicas() const override { return inner_->kv_cache_replicas(); }
  double last_step_device_ms() const override { return inner_->last_step_device_ms(); }
  double last_step_idle_ms() const override { return inner_->last_step_idle_ms(); }
  KvRowAccess* kv_rows() override { return inner_->kv_rows(); }

 protected:
  ModelRunner& inner() { return *inner_; }

 private:
  std::unique_ptr<ModelRunner> inner_;
};

}  // namespace tachyon::runner
