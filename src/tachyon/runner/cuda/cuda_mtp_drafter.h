// CudaMtpDrafter: DeepSeek's MTP module drafting on the GPU inside the CUDA runner's step
// (--speculative-method mtp --device cuda), with no host round trip between the target's forward
// and the module's. The CPU drafter (engine/mtp_drafter.h) defines what a draft is; this is the
// same chain laid out for the device:
//   1. mtp_accept: each sampled sequence's accept walk, as the host's wait() will do it, gives
//      the token each of its rows emits and the row that ends the walk (its last real row).
//   2. The module over every row of the step, with the step's own metadata (so its K/V go to
//      the same slots of the module's cache: the module is one more cache layer, and prefix
//      caching, preemption and rollback cover it as they cover the target's layers). Row t reads
//      the target's hidden state before the final norm and the token after it: the next prompt
//      token, or the token its row emitted (a verify row's accepted draft or drawn token). Rows
//      past a sequence's last real row compute garbage into slots later steps overwrite, as the
//      target's rejected rows do. The last real row's logits give draft 1 (argmax).
//   3. Passes j = 1 .. k - 1: one decode row per sequence at position last + j, reading the
//      previous pass's h' and draft j, roped at last + j + 1 (the module reused, as the CPU
//      drafter and vLLM / SGLang chain one module); each gives draft j + 1. A pass's row goes to
//      the slot of its position in the sequence's blocks, or stops the chain where its blocks end
//      (no lookahead block is taken for drafts).
// The drafts ([sequences, k], -1 after a chain stops) return with the step's token download;
// the engine proposes them for the next step (engine/runner_drafter.h). Drafts affect speed
// only: verification keeps the output the target's.
// One module (num_nextn_predict_layers == 1: DeepSeek-V3/R1) on bf16 weights; with the sparse
// indexer (V3.2, GLM-5) the module is a full DSA layer with its index keys in its cache layer.
// app/runner_factory.cpp refuses more modules and FP8 by name until a GPU test covers them.
// Tests: tests/gpu/test_cuda_speculative.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tachyon/kernels/cuda/mtp_draft.h"
#include "tachyon/model/gpu/gpu_decoder.h"
#include "tachyon/model/gpu/gpu_weights.h"
#include "tachyon/model/mtp.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::runner {

// What a step gives the drafter: the target's step and its device outputs.
struct MtpDraftInputs {
  model::gpu::GpuStep step;                     // the target's shape and metadata
  const kernels::cuda::bf16* hidden = nullptr;  // [num_tokens, hidden] the target's rows before its final norm
  const kernels::cuda::SampledRow* sampled = nullptr;  // [num_sampled] the sampler's rows
  const kernels::cuda::MtpSequence* sequences = nullptr;  // [num_sequences] (host-built, in staging)
  const int32_t* next_known = nullptr;  // [num_tokens] the token after each row, or -(emitting row + 1)
  int32_t num_sequences = 0;            // sampled sequences
  float forced_acceptance = -1.0f;
};

class CudaMtpDrafter {
 public:
  // `module` must outlive nothing: it is uploaded here. `limits` are the target's; k drafts per
  // sequence and step.
  CudaMtpDrafter(const model::Bf16MtpModule& module, model::gpu::LinearDispatch& linear,
                 const model::gpu::GpuLimits& limits, int32_t num_drafts, cudaStream_t stream);
  ~CudaMtpDrafter();

  int32_t num_drafts() const { return num_drafts_; }
  void plan_workspace(model::gpu::WorkspacePlan& plan);
  std::vector<model::gpu::KvRegion> kv_regions() const { return decoder_->kv_regions(); }
  void set_kv_cache(const model::gpu::KvCache& cache) { decoder_->set_kv_cache(cache); }
  std::vector<kernels::cuda::GemmProblem> gemm_problems(int64_t m) const;

  // Enqueues the drafting of the step on the stream; drafts() holds them once it has run.
  void draft(const MtpDraftInputs& in);
  const int32_t* drafts() const { return drafts_; }  // [num_sequences, num_drafts] device

 private:
  // x = eh_proj([enorm(embed(tokens)) | hnorm(hidden rows)]) into the module's residual.
  void project_inputs(const int32_t* tokens, const kernels::cuda::bf16* hidden, const int32_t* hidden_rows,
                      int32_t rows);

  model::gpu::CudaDenseWeights weights_;  // the module as a one-layer model
  cuda::DeviceBuffer front_weights_;      // enorm [H], hnorm [H], eh_proj [H, 2H]
  const kernels::cuda::bf16* enorm_ = nullptr;
  const kernels::cuda::bf16* hnorm_ = nullptr;
  const kernels::cuda::bf16* eh_proj_ = nullptr;
  model::gpu::LinearDispatch& linear_;
  model::gpu::GpuLimits limits_;
  int32_t num_drafts_ = 1;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<model::gpu::GpuDecoder> decoder_;
  // Workspace (planned with the decoder's).
  kernels::cuda::bf16* front_ = nullptr;    // [T, 2H] the module's input rows before eh_proj
  kernels::cuda::bf16* chain_hidden_ = nullptr;  // [S, H] h' of each sequence's last row
  int32_t* emitted_ = nullptr;              // [R] each sampled row's emitted token
  int32_t* last_row_ = nullptr;             // [S] token index of each sequence's last real row
  int32_t* tokens_ = nullptr;               // [T] the token each module row reads
  int32_t* rope_positions_ = nullptr;       // [T]
  int32_t* drafts_ = nullptr;               // [S, k]
  kernels::cuda::MtpChainRows chain_{};     // a chain pass's metadata ([S] each, block tables [S, stride])
};

}  // namespace tachyon::runner
