#include "tachyon/runner/cuda/cuda_mtp_drafter.h"

#include "tachyon/kernels/cuda/embedding.h"
#include "tachyon/model/gpu_support.h"
#include "tachyon/model/rope.h"

namespace tachyon::runner {

namespace kc = kernels::cuda;
namespace gpu = model::gpu;

CudaMtpDrafter::CudaMtpDrafter(const model::Bf16MtpModule& module, gpu::LinearDispatch& linear,
                               const gpu::GpuLimits& limits, int32_t num_drafts, cudaStream_t stream)
    : weights_(module.layer_model, model::rope_inv_freq(module.layer_model.config)),
      linear_(linear),
      limits_(limits),
      num_drafts_(num_drafts),
      stream_(stream) {
  const int64_t H = weights_.config().hidden_size;
  TACHYON_CHECK(num_drafts >= 1) << "internal: MTP drafting with " << num_drafts << " drafts";
  TACHYON_CHECK(static_cast<int64_t>(module.enorm.size()) == H && static_cast<int64_t>(module.hnorm.size()) == H &&
                static_cast<int64_t>(module.eh_proj.size()) == 2 * H * H)
      << "internal: the MTP module's front does not match hidden size " << H;
  const size_t norm_bytes = static_cast<size_t>(H) * sizeof(kc::bf16);
  front_weights_ = cuda::DeviceBuffer(2 * norm_bytes + module.eh_proj.size() * sizeof(kc::bf16));
  auto* base = front_weights_.as<std::byte>();
  TACHYON_CUDA_CHECK(cudaMemcpy(base, module.enorm.data(), norm_bytes, cudaMemcpyHostToDevice));
  TACHYON_CUDA_CHECK(cudaMemcpy(base + norm_bytes, module.hnorm.data(), norm_bytes, cudaMemcpyHostToDevice));
  TACHYON_CUDA_CHECK(cudaMemcpy(base + 2 * norm_bytes, module.eh_proj.data(), module.eh_proj.size() * sizeof(kc::bf16),
                                cudaMemcpyHostToDevice));
  enorm_ = reinterpret_cast<const kc::bf16*>(base);
  hnorm_ = reinterpret_cast<const kc::bf16*>(base + norm_bytes);
  eh_proj_ = reinterpret_cast<const kc::bf16*>(base + 2 * norm_bytes);
  decoder_ = std::make_unique<gpu::GpuDecoder>(weights_, linear, limits, stream);
}

CudaMtpDrafter::~CudaMtpDrafter() = default;

void CudaMtpDrafter::plan_workspace(gpu::WorkspacePlan& plan) {
  decoder_->plan_workspace(plan);
  const size_t T = static_cast<size_t>(limits_.max_tokens), R = static_cast<size_t>(limits_.max_logits_rows);
  const size_t S = static_cast<size_t>(limits_.max_seqs), H = static_cast<size_t>(weights_.config().hidden_size);
  plan.add(&front_, T * 2 * H * sizeof(kc::bf16));
  plan.add(&chain_hidden_, S * H * sizeof(kc::bf16));
  plan.add(&emitted_, R * sizeof(int32_t));
  plan.add(&last_row_, S * sizeof(int32_t));
  plan.add(&tokens_, T * sizeof(int32_t));
  plan.add(&rope_positions_, T * sizeof(int32_t));
  plan.add(&drafts_, S * static_cast<size_t>(num_drafts_) * sizeof(int32_t));
  for (int32_t** field : {&chain_.tokens, &chain_.rope_positions, &chain_.slots, &chain_.context_lens,
                          &chain_.logits_rows}) {
    plan.add(field, S * sizeof(int32_t));
  }
  plan.add(&chain_.query_starts, (S + 1) * sizeof(int32_t));
  plan.add(&chain_.block_tables, S * static_cast<size_t>(limits_.block_table_stride) * sizeof(int32_t));
}

std::vector<kc::GemmProblem> CudaMtpDrafter::gemm_problems(int64_t m) const {
  std::vector<kc::GemmProblem> problems = decoder_->gemm_problems(m);
  const int64_t H = weights_.config().hidden_size;
  problems.push_back({m, H, 2 * H, kc::GemmOutputType::kBF16, false});  // eh_proj
  return problems;
}

void CudaMtpDrafter::project_inputs(const int32_t* tokens, const kc::bf16* hidden, const int32_t* hidden_rows,
                                    int32_t rows) {
  const int64_t H = weights_.config().hidden_size;
  kc::mtp_front(front_, tokens, weights_.embed_tokens(), enorm_, hidden, hidden_rows, hnorm_, rows,
                static_cast<int32_t>(H), static_cast<float>(weights_.config().rms_norm_eps), stream_);
  linear_.gemm(decoder_->workspace().residual, kc::GemmOutputType::kBF16, front_, eh_proj_, nullptr, rows, H, 2 * H,
               stream_);
}

void CudaMtpDrafter::draft(const MtpDraftInputs& in) {
  const int32_t S = in.num_sequences, T = in.step.shape.num_tokens;
  if (T == 0) return;
  const gpu::StepMetadata& m = in.step.metadata;
  const int64_t H = weights_.config().hidden_size;
  const int32_t vocab = static_cast<int32_t>(weights_.config().vocab_size);
  const float* logits = decoder_->workspace().logits;

  // 1. The accept walk, then the module over the step's rows (every step's: the module's cache
  // needs every row, sampled or not); the last real row gives draft 1.
  kc::mtp_accept(emitted_, last_row_, in.sampled, m.token_ids, m.logits_rows, in.sequences, S, in.forced_acceptance,
                 stream_);
  kc::mtp_module_rows(tokens_, rope_positions_, in.next_known, emitted_, m.positions, T, stream_);
  project_inputs(tokens_, in.hidden, nullptr, T);
  gpu::GpuStep rows = in.step;
  rows.metadata.token_ids = tokens_;
  rows.metadata.positions = rope_positions_;
  rows.metadata.logits_rows = last_row_;
  rows.shape.num_logits_rows = S;
  decoder_->forward_from_residual(rows);
  kc::argmax_rows(drafts_, num_drafts_, logits, S, vocab, nullptr, stream_);
  if (num_drafts_ == 1 || S == 0) return;

  // 2. The chain: pass j reads the h' of the previous pass's row of each sequence.
  kc::embedding(chain_hidden_, last_row_, decoder_->workspace().residual, S, H, stream_);
  const gpu::ForwardShape chain_shape{.num_tokens = S,
                                      .num_seqs = S,
                                      .num_logits_rows = S,
                                      .max_query_len = 1,
                                      .max_context_len = limits_.max_model_len,
                                      .num_decode_seqs = S};
  const gpu::GpuStep chain{chain_shape,
                           {.token_ids = chain_.tokens,
                            .positions = chain_.rope_positions,
                            .slots = chain_.slots,
                            .context_lens = chain_.context_lens,
                            .query_starts = chain_.query_starts,
                            .block_tables = chain_.block_tables,
                            .logits_rows = chain_.logits_rows}};
  for (int32_t j = 1; j < num_drafts_; ++j) {
    kc::mtp_chain_rows(chain_, j, in.sequences, S, last_row_, m.positions, m.block_tables, limits_.block_table_stride,
                       limits_.block_size, drafts_, num_drafts_, stream_);
    project_inputs(chain_.tokens, chain_hidden_, nullptr, S);
    decoder_->forward_from_residual(chain);
    kc::argmax_rows(drafts_ + j, num_drafts_, logits, S, vocab, chain_.slots, stream_);
    if (j + 1 < num_drafts_) {
      TACHYON_CUDA_CHECK(cudaMemcpyAsync(chain_hidden_, decoder_->workspace().residual,
                                         static_cast<size_t>(S) * static_cast<size_t>(H) * sizeof(kc::bf16),
                                         cudaMemcpyDeviceToDevice, stream_));
    }
  }
}

}  // namespace tachyon::runner
