// ModelRunner: runs one StepPlan and returns, for every sequence the plan marks `sample`, 1 +
// accepted tokens (core/step_output.h). The contract is split in two so that a device runner can
// work while the host plans:
//   launch(plan)  starts the step; the runner copies what it needs, so the plan may be destroyed
//                 or the engine's sequences changed as soon as it returns;
//   wait()        blocks until the oldest launched step is done and returns its output.
// At most two steps are in flight, and outputs come back in launch order: launch(n), wait(n-1),
// launch(n+1), wait(n), ... is how the engine keeps a device busy while it applies step n-1 and
// plans step n+1 (asynchronous scheduling). A plan launched while another is in flight may carry
// deferred tokens (core/step_plan.h): inputs the previous launched step samples. Every runner
// resolves them; overlaps_steps() says whether launching early gains anything (a device that
// runs while the host plans) or the runner computes at launch anyway (the CPU).
// A runner that cannot verify draft tokens refuses a plan that carries them (Error naming the
// runner). The CPU runner is the reference; the CUDA runner consumes the same plan. The runner
// reads only core/ (plain data), never engine/ (tests/unit/check_layers.py).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tachyon/base/check.h"
#include "tachyon/core/step_output.h"
#include "tachyon/core/step_plan.h"

namespace tachyon::runner {

// The host's view of a runner's KV cache rows, for moving a request's KV between a prefill and a
// decode server: every cache plane's row per token (runner/kv_export.h says the layout and
// implements it for the CPU runner's paged cache). Here so the engine reaches it through this
// interface alone.
class KvRowAccess {
 public:
  virtual ~KvRowAccess() = default;
  // f32 values one token holds over every plane: the width of a transferred row.
  virtual int64_t values_per_token() const = 0;
  // Each plane's width, in the planes' order (they sum to values_per_token()): how rows of a
  // chunk of tokens join the rows of the chunks before it.
  virtual std::vector<int64_t> plane_widths() const = 0;
  // out: [planes][num_tokens][width]; the block table must cover num_tokens tokens.
  virtual void gather(std::span<const int32_t> block_table, int64_t num_tokens, std::span<float> out) const = 0;
  // rows: as gather() writes them, into the slots of `block_table`.
  virtual void scatter(std::span<const int32_t> block_table, int64_t num_tokens, std::span<const float> rows) = 0;

  // KV by reference (CUDA IPC between two processes on one GPU): the decode side copies a
  // prompt's rows straight out of the prefill side's cache, device to device, instead of receiving
  // them as host rows. Both sides must hold the same planes in the same dtype on the same device:
  // reference_fingerprint() names that (the device's UUID, dtype and plane widths) and is "" for a
  // cache no other process can map (the CPU runner's). reference_descriptor(): what a peer needs
  // to map this cache (an IPC handle and the layout), sent once per transfer.
  virtual std::string reference_fingerprint() const { return ""; }
  virtual std::string reference_descriptor() const { return ""; }
  // Copies the rows of tokens [0, num_tokens) out of the cache `descriptor` names, where token t
  // lies in `source_blocks[t / source_block_size]`, into this cache's `block_table`; returns once
  // they are written. Throws Error when the descriptor cannot be mapped or does not fit this cache.
  // Returns the bytes it copied.
  virtual int64_t copy_by_reference(const std::string& descriptor, int64_t source_block_size,
                                    std::span<const int32_t> source_blocks, std::span<const int32_t> block_table,
                                    int64_t num_tokens) {
    (void)descriptor, (void)source_block_size, (void)source_blocks, (void)block_table, (void)num_tokens;
    throw Error("this KV cache cannot copy rows by reference");
  }

  // A cache in this process's host memory (the CPU runner's), for a transport that reads it
  // from another process (UCX: runner/ucx/ucx_kv_rows.h): each plane's f32 values
  // [slots][width], slot = block * block_size + offset in block, planes in the rows' order.
  // No planes for a cache elsewhere (the GPU's).
  struct HostPlane {
    float* data;
    int64_t slots;
    int64_t width;
  };
  struct HostLayout {
    int64_t block_size = 0;
    std::vector<HostPlane> planes;
  };
  virtual HostLayout host_layout() { return {}; }
};

// KV access that hands every call to another one: the base of wrappers that change one behaviour
// and keep the rest (app/kv_transport.h offers no reference, or a UCX one; tests count copies).
class ForwardingKvRowAccess : public KvRowAccess {
 public:
  explicit ForwardingKvRowAccess(KvRowAccess& inner) : inner_(inner) {}
  int64_t values_per_token() const override { return inner_.values_per_token(); }
  std::vector<int64_t> plane_widths() const override { return inner_.plane_widths(); }
  void gather(std::span<const int32_t> block_table, int64_t num_tokens, std::span<float> out) const override {
    inner_.gather(block_table, num_tokens, out);
  }
  void scatter(std::span<const int32_t> block_table, int64_t num_tokens, std::span<const float> rows) override {
    inner_.scatter(block_table, num_tokens, rows);
  }
  std::string reference_fingerprint() const override { return inner_.reference_fingerprint(); }
  std::string reference_descriptor() const override { return inner_.reference_descriptor(); }
  int64_t copy_by_reference(const std::string& descriptor, int64_t source_block_size,
                            std::span<const int32_t> source_blocks, std::span<const int32_t> block_table,
                            int64_t num_tokens) override {
    return inner_.copy_by_reference(descriptor, source_block_size, source_blocks, block_table, num_tokens);
  }
  HostLayout host_layout() override { return inner_.host_layout(); }

 protected:
  KvRowAccess& inner() const { return inner_; }

 private:
  KvRowAccess& inner_;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual void launch(const core::StepPlan& plan) = 0;
  virtual core::StepOutput wait() = 0;
  // launch + wait; every sampled token in plan order (one per sampled sequence without drafts).
  std::vector<core::SampledToken> execute(const core::StepPlan& plan) {
    launch(plan);
    return core::flatten(wait());
  }
  // Structured outputs under asynchronous scheduling: a plan whose sampled sequences carry
  // `mask_follows` (core/step_plan.h) is launched without their masks; the runner starts the
  // step's forward and samples once supply_token_masks() hands the masks over, one per such
  // sequence in plan order (null: every token allowed). The engine calls it right after the
  // launch's previous step is applied, before the next launch or wait. A runner that cannot
  // refuses such plans, and the engine then applies the step in flight before planning a
  // constrained step (it steps synchronously while one runs).
  virtual bool takes_late_token_masks() const { return false; }
  virtual void supply_token_masks(std::span<const core::AllowedTokens> masks);
  // Whether launch() accepts plans with draft tokens (the engine refuses a drafter otherwise).
  virtual bool verifies_drafts() const { return false; }
  // Whether launch() returns before the step's work is done, so that launching step n+1 before
  // waiting on step n keeps the device busy (the engine's asynchronous scheduling turns on).
  virtual bool overlaps_steps() const { return false; }
  // Tokens the model has rows for; the engine validates prompts against it.
  virtual int64_t vocab_size() const = 0;
  // Replicas that each hold their own KV cache of the configured num_blocks blocks (data-parallel
  // attention: runner/dp_cpu_model_runner.h). The engine plans num_blocks * this many block ids,
  // replica d's being [d * num_blocks, (d + 1) * num_blocks), each a pool of its own
  // (engine/kv_cache_manager.h); a block table never spans two.
  virtual int32_t kv_cache_replicas() const { return 1; }
  // Device time of the last step from its upload to its download, in ms; 0 where the runner has
  // no device clock (the CPU). Benchmarks compare it with the step's wall time to show the
  // host's share.
  virtual double last_step_device_ms() const { return 0.0; }
  // Device idle time between the end of the step waited on before the last one and the start of
  // the last one waited on, in ms (the gap asynchronous scheduling closes); 0 without a device
  // clock or before a second step.
  virtual double last_step_idle_ms() const { return 0.0; }
  // The host's view of the KV cache's rows, for moving a request's KV between a prefill and a
  // decode server (runner/kv_export.h); null where this runner cannot export or import it.
  virtual KvRowAccess* kv_rows() { return nullptr; }
};

// A runner that hands every call to another one: the base of wrappers that change one behaviour
// and keep the rest (engine/runner_fault.h fails a chosen launch or wait; tests give a runner
// other KV access, tests/unit/test_kv_by_reference.cpp). Here, beside the interface it forwards,
// so that the engine reaches it through this header alone.
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

// The part of a runner that runs synchronously on the calling thread (the CPU runners, and the
// TP CUDA runner that drives its ranks): launch() resolves the plan's deferred tokens from the
// previous step's output, computes the step at once with run(), and wait() hands outputs over
// in order.
// A plan whose masks follow is kept, its deferred tokens resolved, and computed when
// supply_token_masks() completes it.
class SynchronousModelRunner : public ModelRunner {
 public:
  bool verifies_drafts() const override { return true; }  // the CPU sampler verifies them
  bool takes_late_token_masks() const override { return true; }
  void launch(const core::StepPlan& plan) final;
  void supply_token_masks(std::span<const core::AllowedTokens> masks) final;
  core::StepOutput wait() final;

 protected:
  virtual core::StepOutput run(const core::StepPlan& plan) = 0;

 private:
  void run_and_keep(const core::StepPlan& plan);

  std::deque<core::StepOutput> pending_;  // launched, not yet waited on (at most two)
  std::vector<int32_t> last_sampled_;     // the last launched step's sampled tokens, plan order
  std::optional<core::StepPlan> awaiting_masks_;  // launched, its masks not yet supplied
};

}  // namespace tachyon::runner
