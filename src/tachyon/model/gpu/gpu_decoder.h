// GpuDecoder: a decoder-only model's forward on one GPU, built from layer blocks (gpu_block.h).
// The attention kind (dense q/k/v, or latent with the optional sparse selector) and each layer's
// MLP kind (dense or mixture of experts) are the layer plan's (model/layer_plan.h, which the CPU
// reference reads too), built once at construction; forward() reads top to bottom like the paper:
//   embed -> per layer: [norm, attention, (all-reduce), norm, MLP, (all-reduce)] -> norm ->
//   the rows whose logits are wanted -> LM head -> (gather the vocab slices)
// It owns the weights and the blocks, plans the workspace and lists the KV regions, GEMM
// problems and linear roles the runner needs to allocate, tune and time; the runner owns the
// memory, the staging upload, graphs, the linear dispatch and sampling. A second forward over
// other weights with its own cache (an MTP module, a draft model) is another GpuDecoder; an MTP
// module enters through forward_from_residual (runner/cuda/cuda_mtp_drafter.h).
// Tensor parallelism: given a TpSeam, the decoder is one rank over its shard (model/tp_shard.h):
// vocab-parallel embedding + all-reduce, all-reduce after o_proj and after down (their biases on
// rank 0 only), and a vocab-parallel LM head whose logits are all-gathered. With expert
// parallelism (TpSeam::experts) the MoE block adds only its own experts' share before the same
// all-reduce after the MLP.
#pragma once

#include <memory>
#include <vector>

#include "tachyon/model/gpu/gpu_block.h"

namespace tachyon::dist {
class Communicator;
}

namespace tachyon::model::gpu {

struct TpSeam {
  dist::Communicator* comm = nullptr;  // the TP group (used on the decoder's stream); null: no TP
  int64_t vocab_begin = 0;             // the full-vocab rows this rank's embed / lm_head hold
  int64_t vocab_rows = 0;              // 0: the whole vocabulary
  // Decode context parallelism: the group whose ranks split the latent cache by token (the
  // limits' dcp says this rank's share); null without DCP.
  dist::Communicator* dcp_comm = nullptr;
  // Prefill context parallelism: the group a split step's rows are spread over (latent
  // attention gathers each layer's rows in it: GpuStep::gathered); null without PCP.
  dist::Communicator* pcp_comm = nullptr;
  // Expert parallelism over the TP group: the routed experts this rank holds whole (count 0: the
  // weights hold every expert, or a TP slice of each), and whether it adds DeepSeek's shared
  // expert, which every rank holds whole and one rank adds (moe_mlp.h).
  kernels::cuda::MoeExpertWindow experts;
  bool adds_shared_expert = true;
  // Data-parallel attention over whole-model ranks (runner/cuda/dp_cuda_model_runner.h): the
  // expert group, whose ranks run their own sequences and meet in every MoE layer (moe_mlp.h);
  // null otherwise. With it, `experts` is this rank's window and every rank adds its own tokens'
  // shared expert.
  dist::Communicator* ep_comm = nullptr;
};

class GpuDecoder {
 public:
  // `weights` must outlive the decoder. Throws Error naming the block that cannot serve the model.
  GpuDecoder(const CudaDenseWeights& weights, LinearDispatch& linear, const GpuLimits& limits, cudaStream_t stream,
             TpSeam tp = {});
  ~GpuDecoder();

  const ModelConfig& config() const { return weights_.config(); }
  int64_t vocab_rows() const { return vocab_rows_; }

  // Adds every buffer of the forward (the decoder's and each block's) to `plan`; the workspace
  // pointers are valid once the caller has assigned the plan.
  void plan_workspace(WorkspacePlan& plan);
  const Workspace& workspace() const { return ws_; }
  // The K/V regions one layer caches per token, in layout order.
  std::vector<KvRegion> kv_regions() const;
  void set_kv_cache(const KvCache& cache);
  // The GEMM problems of m rows the forward issues (max_logits_rows bounds the LM head's).
  std::vector<kernels::cuda::GemmProblem> gemm_problems(int64_t m) const;
  // Every role the model has, with its shape and timing input, and whether it runs on `layer`
  // (-1: the LM head); run_role runs it on its workspace buffers.
  std::vector<RoleInfo> roles() const;
  bool role_runs_on(LinearRole role, int64_t layer) const;
  int64_t expanded_prefill_layers() const { return attention_->expanded_prefill_layers(); }
  void run_role(LinearRole role, int64_t layer, int64_t m);

  // The step's forward, logits of its logits rows into workspace().logits ([rows, vocab] f32).
  void forward(const GpuStep& step);
  // Data-parallel attention, a rank with no sequence this step: the MoE layers' part of a forward
  // of zero rows, which serves the other ranks' tokens (step.expert_rows) with this rank's experts.
  void serve_experts(const GpuStep& step);
  // The same from the layers on: the caller has written the step's input rows into
  // workspace().residual ([num_tokens, hidden]) instead of the token embedding (an MTP module's
  // projected [embedding | hidden state] rows). After it, residual holds each row's last hidden
  // state before the final norm (the module's h').
  void forward_from_residual(const GpuStep& step);

 private:
  bool tensor_parallel() const { return tp_.comm != nullptr; }
  void all_reduce_hidden(bf16* data, int64_t rows);
  void gather_logits(int32_t rows);
  void run_lm_head(int64_t m);
  GpuBlock* owner_of(LinearRole role, int64_t layer) const;

  const CudaDenseWeights& weights_;
  TpSeam tp_;
  int64_t vocab_rows_ = 0;
  std::vector<LayerKinds> plan_;  // [num_hidden_layers] layer_plan(config()); the blocks see it as ctx_.layers
  Workspace ws_;
  KvCache kv_;
  std::unique_ptr<SideStream> side_;  // the blocks' run_branches; none under TP (one stream per rank)
  BlockContext ctx_;
  std::unique_ptr<GpuBlock> attention_;
  std::unique_ptr<GpuBlock> dense_mlp_;  // when some layer has a dense MLP
  std::unique_ptr<GpuBlock> moe_mlp_;    // when some layer has experts
  std::vector<GpuBlock*> mlp_of_layer_;  // [num_hidden_layers], chosen once
};

}  // namespace tachyon::model::gpu
