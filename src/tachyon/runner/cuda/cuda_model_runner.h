// CudaModelRunner: the model on one GPU. Consumes the engine's StepPlan:
//   1. the plan's metadata and sampling rows are written into a pinned staging buffer
//      (runner/step_inputs.h) and copied with ONE H2D;
//   2. the forward runs eagerly (prefill and mixed steps) or replays a CUDA graph captured at
//      start-up for the decode batch bucket >= the step's batch (padding rows write nothing;
//      --enforce-eager pads decodes the same way, so both modes compute the same numbers);
//   3. the GPU sampler draws every sampled row; the tokens come back with ONE D2H.
// All memory is planned up front (weights, activation workspace for max_num_batched_tokens,
// staging, then the KV cache from what --gpu-memory-utilization leaves); the step loop never
// allocates. Nothing in the forward reads device memory back: sizes that shape launches come
// from the plan on the host.
// Tensor parallelism: given a CudaTpRank, the runner is one rank of a TP group over its shard
// (model/tp_shard.h): vocab-parallel embedding + all-reduce, all-reduce after o_proj and after
// down (their biases added on rank 0 only, so the sum holds them once), and a vocab-parallel LM
// head whose logits are all-gathered, so every rank samples the same full logits. Collectives
// run on this runner's stream, inside the decode graphs too. TpCudaModelRunner drives the ranks.
// Mixture-of-experts layers run the grouped expert kernels (kernels/cuda/moe.h): Qwen3-MoE's
// softmax routing or DeepSeek-V3's group-limited sigmoid routing plus its shared expert.
// DeepSeek's latent attention (MLA, cuda_mla_attention.cpp) caches one [c_kv | k_pe] row per
// token and layer and attends in the absorbed form; DeepSeek-V3.2 adds the indexer's key cache
// and attends only the tokens the indexer keeps.
// GPU tests: tests/gpu/test_cuda_model_runner.cpp, tests/gpu/test_tp_cuda_runner.cpp.
#pragma once

#include <cstdint>
#include <array>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "tachyon/core/engine_config.h"
#include "tachyon/kernels/cuda/gemm.h"
#include "tachyon/kernels/cuda/head_gemm.h"
#include "tachyon/runner/cuda/cuda_weights.h"
#include "tachyon/runner/cuda/sampling_inputs.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/step_inputs.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::dist {
class Communicator;
}

namespace tachyon::runner {

// One tensor-parallel rank's part of a CudaModelRunner; the default is the whole model.
struct CudaTpRank {
  dist::Communicator* comm = nullptr;  // the TP group (used on the runner's stream); null: no TP
  int64_t vocab_begin = 0;             // the full-vocab rows this rank's embed / lm_head hold
  int64_t vocab_rows = 0;              // 0: the whole vocabulary
};

class CudaModelRunner : public ModelRunner {
 public:
  // Uploads the weights (a TP shard when tp.comm is set), plans memory and sizes the KV cache
  // from free memory; config.num_blocks is ignored and num_blocks() says
  // what fitted. Captures the decode graphs unless config.device.enforce_eager. Uses the
  // calling thread's current CUDA device.
  CudaModelRunner(const model::Bf16ModelWeights& weights, const core::EngineConfig& config, CudaTpRank tp = {});
  ~CudaModelRunner() override;

  // Uploads the step and enqueues its forward, sampling and token download, then returns: the
  // host plans the next step while the GPU runs. Refuses draft tokens (GPU verification is not
  // built yet).
  void launch(const core::StepPlan& plan) override;
  core::StepOutput wait() override;
  int64_t vocab_size() const override { return weights_.config().vocab_size; }
  double last_step_device_ms() const override { return last_step_device_ms_; }

  int32_t num_blocks() const { return num_blocks_; }
  size_t weight_bytes() const { return weights_.bytes(); }
  int64_t graph_replays() const { return graph_replays_; }  // decode steps served by a graph
  const std::vector<int32_t>& graph_batch_sizes() const { return graph_batch_sizes_; }
  // Tests and debugging only: the f32 logits [rows, vocab] of the last step's first `rows`
  // sampled rows (a D2H copy outside the step path).
  std::vector<float> last_logits(int32_t rows) const;

 private:
  struct Workspace;  // the activation buffers, carved from one allocation
  struct ForwardShape {
    int32_t num_tokens = 0;
    int32_t num_seqs = 0;
    int32_t num_logits_rows = 0;
    int32_t max_query_len = 0;
    int32_t max_context_len = 0;
    int32_t num_decode_seqs = 0;  // leading one-token sequences: the split-KV decode kernel; the rest: prefill
  };
  // The step's metadata on the device (views into the staging buffer, runner/step_inputs.h).
  struct StepMetadata {
    const int32_t* positions = nullptr;
    const int32_t* slots = nullptr;
    const int32_t* context_lens = nullptr;
    const int32_t* query_starts = nullptr;
    const int32_t* block_tables = nullptr;
  };

  bool tensor_parallel() const;
  void all_reduce_hidden(bf16* data, int64_t rows);  // sum over the TP group, in place
  void gather_logits(int32_t rows);
  void moe_mlp(const CudaLayerWeights& w, int64_t layer, int64_t tokens);  // a mixture-of-experts layer's MLP into ws_->proj
  // A q/k/v model's attention block from ws_->normed to o_proj's output in ws_->proj.
  void dense_attention(const CudaLayerWeights& w, int64_t layer, const ForwardShape& shape, const StepMetadata& m);
  // MLA's attention block from ws_->normed to o_proj's output in ws_->proj (cuda_mla_attention.cpp).
  void mla_attention(const CudaLayerWeights& w, int64_t layer, const ForwardShape& shape, const StepMetadata& m);
  // DSA: the indexer's keys into the cache and each token's kept positions into ws_->kept.
  void dsa_select(const CudaLayerWeights& w, int64_t layer, const ForwardShape& shape, const StepMetadata& m);
  // Layer `layer`'s cache region 0 (K, or MLA's latents) or 1 (V, or DSA's index keys).
  bf16* cache_region(int64_t layer, int region) const;
  bool has_dense_mlp() const;                                // some layer runs the dense MLP
  void plan_workspace(const core::EngineConfig& config);
  void allocate_kv_cache(const core::EngineConfig& config);
  void forward(const ForwardShape& shape);
  void capture_graphs();
  void tune_gemms(const core::EngineConfig& config);
  // Decode-sized products (m <= 8) can go to our GEMV instead of cuBLASLt: each (m, role) is
  // timed both ways on the loaded weights at start-up and the faster one is kept. A role is one
  // product of a layer (or of the LM head) on the workspace buffers it always reads and writes.
  enum class Role {
    kQkv, kO, kGateUp, kDownWithSilu, kLmHead,  // dense attention and MLP, the LM head
    kMlaQA, kMlaQB, kMlaKvA, kMlaO,              // MLA: q_a (or q_proj), q_b, kv_a, o_proj
    kRouter, kSharedGateUp, kSharedDownWithSilu  // MoE layers: the router, DeepSeek's shared expert
  };
  static constexpr int kRoleCount = 12;
  struct RoleShape {
    int64_t n = 0, k = 0;  // the product's output and input widths; n == 0: the model has no such product
  };
  RoleShape role_shape(Role role) const { return role_shapes_[static_cast<size_t>(role)]; }
  void plan_roles();  // fills role_shapes_ from the model config, once
  bool role_runs_on(Role role, int64_t layer) const;  // layer -1: the LM head
  void choose_gemv();
  std::string kernel_choice_key() const;
  float time_role(Role role, int32_t m, bool gemv);
  void run_role(Role role, int64_t layer, int64_t m);
  bool use_gemv(Role role, int64_t m) const;

  core::EngineConfig config_;
  CudaTpRank tp_;
  int64_t vocab_rows_ = 0;  // rows of this rank's LM head (the whole vocabulary without TP)
  CudaDenseWeights weights_;
  cudaStream_t stream_ = nullptr;
  kernels::cuda::GemmRunner gemm_;
  StepInputLimits limits_;
  StepInputLayout layout_;
  size_t staging_bytes_ = 0;
  cuda::PinnedBuffer staging_host_;
  cuda::DeviceBuffer staging_device_;
  cuda::DeviceBuffer workspace_buffer_;
  std::unique_ptr<Workspace> ws_;
  cuda::DeviceBuffer kv_buffer_;
  int32_t num_blocks_ = 0;
  size_t cache_region_bytes_[2] = {0, 0};  // one layer's region 0 and region 1, every block
  std::unique_ptr<kernels::cuda::HeadGemm> head_gemm_;  // MLA's per-head products
  float rope_attention_scaling_ = 1.0f;  // cos/sin factor (YaRN's mscale)
  float mla_softmax_scale_ = 1.0f;       // qk_head_dim^-0.5 times YaRN's mscale^2
  // DSA, as the CPU reference: index_head_dim^-0.5 inside the relu, index_n_heads^-0.5 on the weights.
  float dsa_score_scale_ = 1.0f;
  float dsa_weight_scale_ = 1.0f;
  cuda::PinnedBuffer sampled_host_;
  // The launched step, until wait(): its sampling rows (to read the kernel's results back) and
  // the ids of its sampled sequences. The staging buffer is not rewritten while one is pending.
  struct PendingStep {
    SamplingInputs sampling;
    std::vector<int64_t> sequence_ids;
    bool ran = false;  // the plan had work: wait() syncs before the staging buffer is reused
  };
  std::optional<PendingStep> pending_;
  std::vector<int32_t> graph_batch_sizes_;
  std::map<int32_t, cudaGraphExec_t> graphs_;  // decode batch size -> instantiated graph
  int64_t graph_replays_ = 0;
  std::array<RoleShape, kRoleCount> role_shapes_{};
  std::map<std::pair<Role, int64_t>, bool> gemv_choice_;  // (role, m) -> our GEMV is faster
  cudaEvent_t step_begin_ = nullptr, step_end_ = nullptr;  // around each step's device work
  double last_step_device_ms_ = 0.0;
};

}  // namespace tachyon::runner
