// CudaModelRunner: the model on one GPU. It owns the memory and the step mechanics; the forward
// itself is model/gpu/gpu_decoder.h (layer blocks), which the runner never looks inside:
//   launch(plan): the plan's metadata and sampling rows are written into a pinned staging buffer
//     (runner/step_inputs.h) and copied with ONE H2D; the decoder's forward runs eagerly
//     (prefill and mixed steps) or replays a CUDA graph captured at start-up for the decode batch
//     bucket >= the step's batch (padding rows write nothing; --enforce-eager pads decodes the
//     same way, so both modes compute the same numbers); the GPU sampler draws every sampled
//     row and ONE D2H of the tokens is enqueued;
//   wait(): syncs on the oldest launched step's end and reads its tokens back.
// Draft tokens (speculative decoding): a sampled sequence with k drafts has 1 + k logits rows.
// The sampler draws all of them in its one launch, row i as a plain decode step would draw it
// after drafts 0..i-1 (step, penalty history and min_tokens test advanced by i;
// sampling_inputs.h): a row's draw does not depend on whether earlier drafts are accepted, so
// nothing waits for the host between rows. wait() then applies the CPU reference's rule
// (runner/plan_sampling.h, draft_acceptance.h) to each sequence's rows: an accepted row emits
// its draft, and the first rejected row's own token (or row k's) ends the list. A verify step
// (every sequence runs its last known token and its drafts) is laid out as decode rows, row i
// at context num_computed + i + 1 (step_inputs.h): it runs the decode kernels and replays the
// decode graph of its bucket of rows, so each row attends as the plain decode at its position
// does. The tokens are the plain run's, except where a GEMM over more rows rounds bf16 otherwise
// than the plain step's and flips a near tie. Logits rows, sampler rows, attention sequences and
// their staging and download buffers are sized for core::max_decode_rows =
// min(max_num_batched_tokens, max_num_seqs * (1 + k)) rows, k from config.speculative:
// max_num_seqs rows without speculation, as before; the graph buckets reach it too.
// Two steps may be in flight (asynchronous scheduling, model_runner.h): each has its own pinned
// staging and download buffers and events; the device-side staging, workspace and sampler output
// are shared and used in stream order. A step's deferred tokens are resolved on the device from
// the previous step's sampled rows by the first kernel of the forward, inside the graphs too, so
// step n+1 is enqueued before the host knows step n's tokens.
// All memory is planned up front (weights, the decoder's workspace for max_num_batched_tokens,
// staging, then the KV cache of the decoder's regions from what --gpu-memory-utilization
// leaves); the step loop never allocates. The runner is the decoder's LinearDispatch: each
// product of a role goes to our GEMV or to cuBLASLt, whichever was faster at start-up
// (cuda_kernel_choice.cpp). Tensor parallelism: given a CudaTpRank, the decoder is one rank of a
// TP group over its shard; TpCudaModelRunner drives the ranks.
// MTP drafting (--speculative-method mtp): given the model's MTP module, the runner drafts the
// next step's tokens itself, on the device after the sampler (cuda_mtp_drafter.h); the module's
// cache is one more layer of every KV block, and the drafts come back with the step's tokens
// (core::SequenceOutput::next_drafts).
// GPU tests: tests/gpu/test_cuda_model_runner.cpp, tests/gpu/test_tp_cuda_runner.cpp,
// tests/gpu/test_cuda_speculative.cpp (draft verification).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <vector>

#include "tachyon/core/engine_config.h"
#include "tachyon/kernels/cuda/gemm.h"
#include "tachyon/model/gpu/gpu_decoder.h"
#include "tachyon/model/gpu/gpu_weights.h"
#include "tachyon/runner/cuda/cuda_kv_rows.h"
#include "tachyon/runner/cuda/cuda_mtp_drafter.h"
#include "tachyon/runner/cuda/sampling_inputs.h"
#include "tachyon/runner/model_runner.h"
#include "tachyon/runner/step_inputs.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::runner {

// One tensor-parallel rank's part of a CudaModelRunner; the default is the whole model.
struct CudaTpRank {
  dist::Communicator* comm = nullptr;  // the TP group (used on the runner's stream); null: no TP
  int64_t vocab_begin = 0;             // the full-vocab rows this rank's embed / lm_head hold
  int64_t vocab_rows = 0;              // 0: the whole vocabulary
  // Prefill context parallelism (runner/cuda/pcp_cuda_model_runner.h): the group a split step's
  // rows are spread over; null without PCP.
  dist::Communicator* pcp_comm = nullptr;
  // Expert parallelism over the TP group (gpu::TpSeam): the routed experts this rank holds whole
  // (expert_count 0: a slice of every expert, or the whole model), and whether it adds the
  // replicated shared expert (one rank does).
  int32_t expert_begin = 0;
  int32_t expert_count = 0;
  bool adds_shared_expert = true;
  // Data-parallel attention (runner/cuda/dp_cuda_model_runner.h): the expert group of whole-model
  // ranks that meet in every MoE layer (gpu::TpSeam::ep_comm); null otherwise.
  dist::Communicator* ep_comm = nullptr;
};

// Every row of a split prefill step (prefill context parallelism), in the group's gather order:
// rank 0's rows, then rank 1's, ...; rank_rows[r] rows each.
struct SplitStepRows {
  std::span<const int64_t> positions;
  std::span<const int64_t> slots;
  std::span<const int32_t> rank_rows;
};

class CudaModelRunner : public ModelRunner, private model::gpu::LinearDispatch {
 public:
  // Uploads the weights (a TP shard when tp.comm is set), plans memory and sizes the KV cache
  // from free memory; config.num_blocks is ignored and num_blocks() says what fitted. Captures
  // the decode graphs unless config.device.enforce_eager. Uses the calling thread's current
  // CUDA device. `mtp`: the model's MTP module when config.speculative.method is "mtp" (the
  // runner then drafts config.speculative.num_speculative_tokens per sequence and step).
  CudaModelRunner(const model::Bf16ModelWeights& weights, const core::EngineConfig& config, CudaTpRank tp = {},
                  const model::Bf16MtpModule* mtp = nullptr);
  // An FP8 run (model/fp8_projections.h): its projections in E4M3, products of up to 8 rows
  // through fp8_gemv, larger ones FP8 x FP8 on cuBLASLt (or dequantized into a bf16 scratch). A TP
  // shard when tp.comm is set (model/fp8_tp_shard.h).
  CudaModelRunner(const model::Fp8GpuWeights& weights, const core::EngineConfig& config, CudaTpRank tp = {});
  // Weights already on the device, uploaded layer by layer as a loader read them
  // (model/gpu/stream_gpu_weights.h), bf16 or FP8 (weights.fp8()); a TP rank's when tp.comm is set.
  CudaModelRunner(model::gpu::CudaDenseWeights weights, const core::EngineConfig& config, CudaTpRank tp = {});
  ~CudaModelRunner() override;

  // Uploads the step and enqueues its forward, sampling and token download, then returns: the
  // host plans the next step while the GPU runs. Refuses (Error) a step with more logits rows
  // than it was sized for, and deferred tokens together with drafts (either in the plan or in
  // the step launched before it): deferred tokens index one sampled row per sequence.
  // A plan whose sampled sequences' masks follow (structured outputs under asynchronous
  // scheduling) enqueues its forward only; supply_token_masks() uploads the masks and enqueues
  // the sampler and the download. Refused with MTP drafting (the engine drafts synchronously).
  void launch(const core::StepPlan& plan) override;
  // Prefill context parallelism: launches this rank's part `local` of a split step (its rows,
  // each sampled piece carrying its sequence's sampling inputs: runner/pcp_plan.h) whose rows are
  // `rows`; every row of the step is stored in this rank's cache (one gather per layer), and the
  // rank samples its own logits rows. Eager only (checked at start-up).
  void launch_split(const core::StepPlan& local, const SplitStepRows& rows);
  // Data-parallel attention: launches this rank's own `plan` whose MoE layers serve every rank's
  // rows together (rank_rows[r]: the forward rows of rank r's step, forward_rows() of its plan;
  // an idle rank's 0). Eager only (checked at start-up).
  void launch_expert_group(const core::StepPlan& plan, std::span<const int32_t> rank_rows);
  // The same for a rank with no sequence this step: the MoE layers' part of a forward of zero
  // rows, for the other ranks' tokens; returns once it has run.
  void serve_experts(std::span<const int32_t> rank_rows);
  // Rows the forward of `plan` runs: its tokens, padded to a decode bucket where launch() pads.
  int32_t forward_rows(const core::StepPlan& plan) const;
  bool takes_late_token_masks() const override { return true; }
  void supply_token_masks(std::span<const core::AllowedTokens> masks) override;
  core::StepOutput wait() override;
  bool verifies_drafts() const override { return true; }
  bool overlaps_steps() const override { return true; }
  int64_t vocab_size() const override { return weights_.config().vocab_size; }
  double last_step_device_ms() const override { return last_step_device_ms_; }
  double last_step_idle_ms() const override { return last_step_idle_ms_; }
  // The cache's rows for prefill/decode disaggregation (cuda_kv_rows.h); null with an FP8 cache,
  // an MTP module (its cache layer does not move) or tensor parallelism.
  KvRowAccess* kv_rows() override { return kv_rows_.get(); }

  int32_t num_blocks() const { return num_blocks_; }
  size_t weight_bytes() const { return weights_.bytes(); }
  int64_t graph_replays() const { return graph_replays_; }  // decode and verify steps served by a graph
  using LinearDispatch::swiglu_epilogues;  // gate_up products that applied SwiGLU themselves
  int64_t draft_graph_replays() const { return mtp_graph_replays_; }  // MTP drafting served by a graph
  // FP8 products issued on E4M3 rows their producer wrote (LinearDispatch::linear_quantized).
  int64_t fused_fp8_products() const { return fused_fp8_products_; }
  // Layers of latent attention that prefilled in the expanded form (model/gpu/latent_attention.h), for tests.
  int64_t expanded_prefill_layers() const { return decoder_->expanded_prefill_layers(); }
  // E4M3 products issued per-row scaled (per_row_product()), for tests.
  int64_t per_row_fp8_products() const { return per_row_fp8_products_; }
  const std::vector<int32_t>& graph_batch_sizes() const { return graph_batch_sizes_; }
  // Tests and debugging only: the f32 logits [rows, vocab] of the last step's first `rows`
  // logits rows, drafts' rows included (a D2H copy outside the step path).
  std::vector<float> last_logits(int32_t rows) const;

 private:
  using LinearRole = model::gpu::LinearRole;
  using LinearShape = model::gpu::LinearShape;

  // LinearDispatch: the timed choice per (role, rows).
  void linear(LinearRole role, LinearShape shape, void* out, kernels::cuda::GemmOutputType type,
              const kernels::cuda::bf16* in, const model::gpu::LinearWeight& weight, const kernels::cuda::bf16* bias,
              int64_t m, cudaStream_t stream) override;
  bool stream_local(LinearRole role, LinearShape shape, const model::gpu::LinearWeight& weight,
                    int64_t m) const override;
  void gemm(void* out, kernels::cuda::GemmOutputType type, const kernels::cuda::bf16* in,
            const kernels::cuda::bf16* weight, const kernels::cuda::bf16* bias, int64_t m, int64_t n, int64_t k,
            cudaStream_t stream) override;
  kernels::cuda::Fp8Rows fp8_input(LinearRole role, LinearShape shape, const model::gpu::LinearWeight& weight,
                                   const kernels::cuda::bf16* bias, int64_t m) override;
  bool fuses_fp8_quantize() const override { return fp8_fused_quantize_; }
  void linear_quantized(LinearShape shape, kernels::cuda::bf16* out,
                        const model::gpu::LinearWeight& weight, const kernels::cuda::bf16* bias, int64_t m,
                        const kernels::cuda::Fp8Rows& rows, cudaStream_t stream) override;
  // linear() of an FP8 weight on the FP8 tensor cores (bf16 out, n and k multiples of 16); false,
  // having written nothing to `out`, where cuBLASLt has no algorithm for m rows even padded.
  bool linear_fp8(kernels::cuda::bf16* out, const kernels::cuda::bf16* in, const model::gpu::LinearWeight& weight,
                  const kernels::cuda::bf16* bias, int64_t m, LinearShape shape, cudaStream_t stream);
  // Whether the E4M3 product of m rows of `weight` is per-row scaled (per-token inputs, cuBLASLt's
  // per-row scaling): per-channel weights (LinearWeight::scale_by_row) at fp8_per_row_min_rows_
  // rows or more; otherwise block-scaled.
  bool per_row_product(const model::gpu::LinearWeight& weight, int64_t m) const {
    return weight.scale_by_row != nullptr && per_row_rows(m);
  }
  // Whether products of m rows are past the per-row threshold (per_row_product(), tune_gemms()).
  bool per_row_rows(int64_t m) const { return m >= fp8_per_row_min_rows_; }
  // The rows the E4M3 product of m input rows runs with: m, or m padded to a multiple of 16 where
  // cuBLASLt serves only that; 0 where it serves neither (linear() then dequantizes).
  int64_t fp8_product_rows(const model::gpu::LinearWeight& weight, const kernels::cuda::bf16* bias, int64_t m,
                           LinearShape shape, cudaStream_t stream);
  // The product of the E4M3 rows in fp8_rows_ (`rows` of them, fp8_product_rows) into out's m rows.
  void run_fp8_rows(kernels::cuda::bf16* out, const model::gpu::LinearWeight& weight, const kernels::cuda::bf16* bias,
                    int64_t m, int64_t rows, LinearShape shape, cudaStream_t stream);

  void start(const core::EngineConfig& config, const model::Bf16MtpModule* mtp = nullptr);  // after the upload
  static void check_cache_types(const core::EngineConfig& config, const model::ModelConfig& model, bool tensor_parallel);
  void plan_memory(const core::EngineConfig& config, const model::Bf16MtpModule* mtp);
  // MTP drafting: the step's per-token next tokens and per-sequence records into staging's
  // runner region (a fixed offset: a graph reads them there), padded with padding records to
  // `num_records` sequences.
  void stage_mtp_inputs(const core::StepPlan& plan, const StepInputSummary& summary, std::byte* staging,
                        int32_t num_records);
  // The drafter's inputs for a step of `shape` drafting for `num_sequences` records.
  MtpDraftInputs mtp_draft_inputs(const model::gpu::ForwardShape& shape, int32_t num_sequences) const;
  // Sequences a padded step of `padded` rows drafts for: fixed per bucket, so its graph is too.
  int32_t mtp_padded_sequences(int32_t padded) const;
  void allocate_kv_cache(const core::EngineConfig& config);
  model::gpu::StepMetadata step_metadata() const;  // device views into the staging buffer
  void forward(const model::gpu::ForwardShape& shape);
  void capture_graphs();
  // Timed kernel choices (cuda_kernel_choice.cpp): cuBLASLt algorithms for the decoder's GEMM
  // problems, and for decode-sized products (m <= 8) our GEMV or cuBLASLt, timed per (m, role)
  // on the loaded weights and cached on disk under kernel_choice_key().
  void tune_gemms(const core::EngineConfig& config);
  void choose_gemv();
  bool load_gemv_choices(const std::filesystem::path& path, const std::string& key);
  std::string kernel_choice_key() const;
  float time_role(LinearRole role, int32_t m, bool gemv);
  bool use_gemv(LinearRole role, int64_t m) const;

  core::EngineConfig config_;
  CudaTpRank tp_;
  model::gpu::CudaDenseWeights weights_;
  cudaStream_t stream_ = nullptr;
  kernels::cuda::GemmRunner gemm_;
  cuda::DeviceBuffer fp8_scratch_;  // FP8 runs: one projection dequantized to bf16 (kernels/cuda/fp8.h)
  cuda::DeviceBuffer fp8_rows_;        // FP8 runs: a product's input rows in E4M3 ...
  cuda::DeviceBuffer fp8_row_scales_;  // ... and their factors (kernels/cuda/fp8.h fp8_quantize_rows)
  cuda::DeviceBuffer fp8_padded_out_;  // ... and a padded product's output, its real rows copied out
  std::set<std::array<int64_t, 3>> fp8_fallbacks_logged_;  // (m, n, k) told once each on stderr
  // fp8_input() answers (producers quantize for the FP8 products): TACHYON_FP8_FUSED_QUANTIZE=0
  // turns it off, so one binary times and compares both.
  bool fp8_fused_quantize_ = true;
  static constexpr int64_t kFp8PerRowMinRows = 1024;  // the default of TACHYON_FP8_PER_ROW_MIN_ROWS
  int64_t fp8_per_row_min_rows_ = kFp8PerRowMinRows;   // read at start (fp8_per_row_min_rows())
  int64_t fused_fp8_products_ = 0;
  int64_t per_row_fp8_products_ = 0;
  StepInputLimits limits_;
  StepInputLayout layout_;
  size_t staging_bytes_ = 0;
  // Per launched step in flight (two at most): the host side of its upload and of its download.
  static constexpr int kInFlight = 2;
  std::array<cuda::PinnedBuffer, kInFlight> staging_host_;
  std::array<cuda::PinnedBuffer, kInFlight> sampled_host_;
  std::array<cuda::PinnedBuffer, kInFlight> drafts_host_;  // MTP: [sequences, k] drafts of the step
  cuda::DeviceBuffer staging_device_;
  std::unique_ptr<model::gpu::GpuDecoder> decoder_;
  cuda::DeviceBuffer workspace_buffer_;  // the decoder's workspace, then the sampler's
  void* sampler_scratch_ = nullptr;
  size_t sampler_scratch_bytes_ = 0;
  kernels::cuda::SampledRow* sampled_ = nullptr;  // [max_logits_rows] the sampler's results on the device
  cuda::DeviceBuffer kv_buffer_;
  std::unique_ptr<CudaMtpDrafter> mtp_;  // --speculative-method mtp
  cuda::DeviceBuffer mtp_kv_buffer_;     // the module's cache layer, num_blocks_ blocks
  std::unique_ptr<CudaKvRowAccess> kv_rows_;
  size_t mtp_records_ = 0;               // staging offsets of the MTP records [max_num_seqs] ...
  size_t mtp_next_known_ = 0;            // ... and of each row's next token [max_tokens]
  std::map<int32_t, cudaGraphExec_t> mtp_graphs_;  // decode rows (bucket) -> the drafting's graph
  int64_t mtp_graph_replays_ = 0;
  int32_t num_blocks_ = 0;
  // What wait() needs of a sampled sequence to turn its 1 + k rows into tokens: its drafts and
  // the accept rule's key (seed, output count before the step; row i's step is that + i).
  struct PendingSequence {
    int64_t sequence_id = 0;
    std::vector<int32_t> drafts;  // [k] verified by its rows 0..k-1
    uint64_t seed = 0;
    int64_t num_output_tokens = 0;
  };
  // A launched step, until wait(): its sampling rows (to read the kernel's results back), its
  // sampled sequences in plan order, the plan's forced acceptance, and its number among the
  // steps with work (which picks its host buffers, index % kInFlight, and its events, index % 3).
  struct PendingStep {
    SamplingInputs sampling;
    std::vector<PendingSequence> sequences;
    float forced_acceptance = -1.0f;  // StepPlan::forced_acceptance; < 0: exact
    bool ran = false;  // the plan had work
    bool drafted = false;  // MTP drafts were made (drafts_host_ holds [sequences, k])
    int64_t index = 0;
    int32_t num_sampled = 0;    // logits rows the sampler draws
    size_t allowed_offset = 0;  // staging offset of its token masks; 0: none
    bool awaits_masks = false;  // launched with masks that follow: not sampled yet
  };
  void enqueue_sampling(const PendingStep& step);
  size_t allowed_words() const;  // ceil(vocab / 32): a token mask's width
  std::deque<PendingStep> pending_;
  // Prefill context parallelism: the staging offset of a split step's gathered positions and
  // slots ([max_tokens] each, in the runner region), the step launch_split is launching, and
  // what the forward of that step reads (empty otherwise).
  size_t pcp_rows_ = 0;
  const SplitStepRows* split_rows_ = nullptr;
  model::gpu::GatheredRows gathered_{};
  // Data-parallel attention: the rows every rank of the expert group brings to the step being
  // launched (launch_expert_group); empty otherwise.
  std::span<const int32_t> expert_rows_;
  bool last_launch_had_drafts_ = false;  // the last step with work carried drafts (sampled_ holds 1 + k rows each)
  int64_t steps_launched_ = 0;  // steps with work so far
  int64_t last_waited_ = -1;    // index of the last step with work that wait() returned
  std::vector<int32_t> graph_batch_sizes_;
  std::map<int32_t, cudaGraphExec_t> graphs_;  // decode rows (bucket) -> instantiated graph
  int64_t graph_replays_ = 0;
  std::map<std::pair<LinearRole, int64_t>, bool> gemv_choice_;  // (role, m) -> our GEMV is faster
  // Around each step's device work; three sets, so that the step before the one being waited on
  // (whose end the idle gap is measured from) is not re-recorded by the one launched after it.
  struct StepEvents {
    cudaEvent_t begin = nullptr, end = nullptr;
  };
  std::array<StepEvents, 3> events_;
  double last_step_device_ms_ = 0.0;
  double last_step_idle_ms_ = 0.0;
};

}  // namespace tachyon::runner
