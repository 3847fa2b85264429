#include "tachyon/model/gpu/gpu_decoder.h"

#include <algorithm>

#include "tachyon/base/env_switch.h"
#include "tachyon/dist/communicator.h"
#include "tachyon/kernels/cuda/embedding.h"
#include "tachyon/kernels/cuda/rms_norm.h"
#include "tachyon/model/gpu/dense_attention.h"
#include "tachyon/model/gpu/dense_mlp.h"
#include "tachyon/model/gpu/latent_attention.h"
#include "tachyon/model/gpu/moe_mlp.h"
#include "tachyon/model/gpu_support.h"

namespace tachyon::model::gpu {

namespace kc = kernels::cuda;

const char* linear_role_name(LinearRole role) {
  static const char* kNames[kLinearRoleCount] = {"qkv",     "o_proj", "gate_up", "silu+down", "lm_head",
                                                 "mla q_a", "mla q_b", "kv_a",   "mla o",     "router",
                                                 "shared gate_up", "shared silu+down"};
  return kNames[static_cast<int>(role)];
}

namespace {

// TACHYON_SIDE_STREAM=0 runs every block's branches one after the other on the decoder's stream:
// to time the overlap against its absence with one binary, and to rule it out when debugging.
bool side_stream_enabled() { return env_switch_on("TACHYON_SIDE_STREAM"); }

}  // namespace

GpuDecoder::GpuDecoder(const CudaDenseWeights& weights, LinearDispatch& linear, const GpuLimits& limits,
                       cudaStream_t stream, TpSeam tp)
    : weights_(weights),
      tp_(tp),
      vocab_rows_(tp.vocab_rows > 0 ? tp.vocab_rows : weights.config().vocab_size),
      plan_(layer_plan(weights.config())),
      side_(tp.comm == nullptr && side_stream_enabled() ? std::make_unique<SideStream>() : nullptr),
      ctx_{weights.config(), weights, ws_, linear, limits, &kv_, stream, tp.comm == nullptr || tp.comm->rank() == 0,
           plan_, side_.get(), tp.dcp_comm, tp.pcp_comm, tp.experts, tp.adds_shared_expert, tp.ep_comm} {
  const ModelConfig& c = config();
  const std::string reason = gpu_decoder_unsupported(c);
  TACHYON_CHECK(reason.empty()) << "the GPU decoder cannot serve " << c.architecture << ": " << reason;
  TACHYON_CHECK(!plan_.empty()) << "the GPU decoder needs at least one layer";
  TACHYON_CHECK(limits.max_logits_rows >= limits.max_seqs && limits.max_logits_rows <= limits.max_tokens)
      << "internal: max_logits_rows " << limits.max_logits_rows << " outside [max_seqs " << limits.max_seqs
      << ", max_tokens " << limits.max_tokens << "]";
  TACHYON_CHECK(limits.dcp.size == 1 || (tp.dcp_comm != nullptr && tp.dcp_comm->size() == limits.dcp.size &&
                                          tp.dcp_comm->rank() == limits.dcp.rank))
      << "internal: decode context parallelism of " << limits.dcp.size << " ranks without its group";
  TACHYON_CHECK(limits.pcp_size == 1 || (tp.pcp_comm != nullptr && tp.pcp_comm->size() == limits.pcp_size))
      << "internal: prefill context parallelism of " << limits.pcp_size << " ranks without its group";
  TACHYON_CHECK(tp.ep_comm == nullptr || (tp.comm == nullptr && tp.experts.count > 0))
      << "internal: data-parallel attention's expert group runs whole-model ranks, each with a window of the experts";
  // One attention block serves every layer: a family's layers share their attention kind.
  if (plan_.front().attention == AttentionKind::kLatent) {
    attention_ = std::make_unique<LatentAttentionBlock>(ctx_);
  } else {
    attention_ = std::make_unique<DenseAttentionBlock>(ctx_);
  }
  for (const LayerKinds& kinds : plan_) {
    TACHYON_CHECK(kinds.attention == plan_.front().attention) << "internal: the layers' attention kinds differ";
    const bool experts = kinds.mlp == MlpKind::kExperts;
    std::unique_ptr<GpuBlock>& mlp = experts ? moe_mlp_ : dense_mlp_;
    if (mlp == nullptr) {
      mlp = experts ? std::unique_ptr<GpuBlock>(std::make_unique<MoeMlpBlock>(ctx_))
                    : std::unique_ptr<GpuBlock>(std::make_unique<DenseMlpBlock>(ctx_));
    }
    mlp_of_layer_.push_back(mlp.get());
  }
}

GpuDecoder::~GpuDecoder() = default;

void GpuDecoder::plan_workspace(WorkspacePlan& plan) {
  const ModelConfig& c = config();
  const size_t T = static_cast<size_t>(ctx_.limits.max_tokens), R = static_cast<size_t>(ctx_.limits.max_logits_rows);
  const size_t hidden = static_cast<size_t>(c.hidden_size);
  const size_t attn_width = std::max(static_cast<size_t>(c.q_size()),
                                     static_cast<size_t>(c.num_attention_heads) * static_cast<size_t>(c.value_head_dim()));
  const size_t slice = R * static_cast<size_t>(vocab_rows_) * 4;
  plan.add(&ws_.residual, T * hidden * 2);
  plan.add(&ws_.normed, T * hidden * 2);
  plan.add(&ws_.attn, T * attn_width * 2);
  plan.add(&ws_.proj, T * hidden * 2);
  plan.add(&ws_.selected, R * hidden * 2);
  plan.add(&ws_.logits, R * static_cast<size_t>(c.vocab_size) * 4);
  plan.add(&ws_.local_logits, tensor_parallel() ? slice : 0);
  plan.add(&ws_.gathered_logits, tensor_parallel() ? static_cast<size_t>(tp_.comm->size()) * slice : 0);
  attention_->plan_workspace(plan);
  if (dense_mlp_ != nullptr) dense_mlp_->plan_workspace(plan);
  if (moe_mlp_ != nullptr) moe_mlp_->plan_workspace(plan);
}

std::vector<KvRegion> GpuDecoder::kv_regions() const { return attention_->kv_regions(); }

void GpuDecoder::set_kv_cache(const KvCache& cache) { kv_ = cache; }

std::vector<kc::GemmProblem> GpuDecoder::gemm_problems(int64_t m) const {
  std::vector<kc::GemmProblem> problems;
  attention_->add_gemm_problems(m, problems);
  if (dense_mlp_ != nullptr) dense_mlp_->add_gemm_problems(m, problems);
  if (moe_mlp_ != nullptr) moe_mlp_->add_gemm_problems(m, problems);
  if (m <= ctx_.limits.max_logits_rows) problems.push_back({m, vocab_rows_, config().hidden_size, kc::GemmOutputType::kF32, false});
  return problems;
}

std::vector<RoleInfo> GpuDecoder::roles() const {
  std::vector<RoleInfo> roles = attention_->roles();
  for (const GpuBlock* mlp : {dense_mlp_.get(), moe_mlp_.get()}) {
    if (mlp == nullptr) continue;
    for (const RoleInfo& r : mlp->roles()) roles.push_back(r);
  }
  const int64_t H = config().hidden_size;
  roles.push_back({LinearRole::kLmHead, {vocab_rows_, H}, ws_.selected, H});
  std::sort(roles.begin(), roles.end(), [](const RoleInfo& a, const RoleInfo& b) { return a.role < b.role; });
  return roles;
}

GpuBlock* GpuDecoder::owner_of(LinearRole role, int64_t layer) const {
  if (layer < 0 || layer >= static_cast<int64_t>(mlp_of_layer_.size())) return nullptr;
  switch (role) {
    case LinearRole::kGateUp:
    case LinearRole::kDownWithSilu:
      return mlp_of_layer_[static_cast<size_t>(layer)] == dense_mlp_.get() ? dense_mlp_.get() : nullptr;
    case LinearRole::kRouter:
    case LinearRole::kSharedGateUp:
    case LinearRole::kSharedDownWithSilu:
      return mlp_of_layer_[static_cast<size_t>(layer)] == moe_mlp_.get() ? moe_mlp_.get() : nullptr;
    case LinearRole::kLmHead:
      return nullptr;
    default:
      return attention_.get();
  }
}

bool GpuDecoder::role_runs_on(LinearRole role, int64_t layer) const {
  if (role == LinearRole::kLmHead) return layer < 0;
  const GpuBlock* owner = owner_of(role, layer);
  if (owner == nullptr) return false;
  for (const RoleInfo& r : owner->roles()) {
    if (r.role == role) return r.shape.n > 0;
  }
  return false;
}

void GpuDecoder::run_role(LinearRole role, int64_t layer, int64_t m) {
  if (role == LinearRole::kLmHead) {
    run_lm_head(m);
  } else if (GpuBlock* owner = owner_of(role, layer)) {
    owner->run_role(role, layer, m);
  }
}

void GpuDecoder::run_lm_head(int64_t m) {
  ctx_.linear.linear(LinearRole::kLmHead, {vocab_rows_, config().hidden_size},
                     tensor_parallel() ? ws_.local_logits : ws_.logits, GemmOutputType::kF32, ws_.selected,
                     weights_.lm_head(), nullptr, m, ctx_.stream);
}

void GpuDecoder::all_reduce_hidden(bf16* data, int64_t rows) {
  if (!tensor_parallel() || rows == 0) return;
  tp_.comm->all_reduce(data, data, static_cast<size_t>(rows * config().hidden_size), dist::ReduceType::kBF16,
                       ctx_.stream);
}

void GpuDecoder::forward(const GpuStep& step) {
  const int64_t T = step.shape.num_tokens, H = config().hidden_size;
  kc::embedding_shard(ws_.residual, step.metadata.token_ids, weights_.embed_tokens(), T, H, tp_.vocab_begin, vocab_rows_,
                      ctx_.stream);
  all_reduce_hidden(ws_.residual, T);
  forward_from_residual(step);
}

void GpuDecoder::forward_from_residual(const GpuStep& step) {
  const ModelConfig& c = config();
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t T = step.shape.num_tokens, H = c.hidden_size;
  const StepMetadata& m = step.metadata;
  cudaStream_t stream = ctx_.stream;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const CudaLayerWeights& w = weights_.layers()[static_cast<size_t>(l)];
    // Attention block: the previous MLP's output joins the residual inside the norm. Each norm
    // also writes the E4M3 input rows of the block's first product where that runs on them
    // (GpuBlock::normed_fp8_rows; empty in bf16 runs).
    if (l == 0) {
      kc::rms_norm(ws_.normed, ws_.residual, w.input_norm, T, H, eps, stream, attention_->normed_fp8_rows(l, T));
    } else {
      kc::add_rms_norm(ws_.normed, ws_.residual, ws_.proj, w.input_norm, T, H, eps, stream,
                       attention_->normed_fp8_rows(l, T));
    }
    attention_->forward(l, step);
    all_reduce_hidden(ws_.proj, T);
    // MLP block.
    GpuBlock& mlp = *mlp_of_layer_[static_cast<size_t>(l)];
    kc::add_rms_norm(ws_.normed, ws_.residual, ws_.proj, w.post_attention_norm, T, H, eps, stream,
                     mlp.normed_fp8_rows(l, T));
    mlp.forward(l, step);
    all_reduce_hidden(ws_.proj, T);
  }
  // Final norm on every row (cheap), then only the rows whose logits are wanted go through the
  // LM head: gathered by the embedding kernel, a row lookup by index.
  kc::add_rms_norm(ws_.normed, ws_.residual, ws_.proj, weights_.final_norm(), T, H, eps, stream);
  kc::embedding(ws_.selected, m.logits_rows, ws_.normed, step.shape.num_logits_rows, H, stream);
  run_lm_head(step.shape.num_logits_rows);
  if (tensor_parallel()) gather_logits(step.shape.num_logits_rows);
}

void GpuDecoder::serve_experts(const GpuStep& step) {
  TACHYON_CHECK(tp_.ep_comm != nullptr && step.shape.num_tokens == 0 && !step.expert_rows.rank_rows.empty())
      << "internal: serve_experts() is a data-parallel rank's step of zero rows";
  for (int64_t l = 0; l < config().num_hidden_layers; ++l) {
    if (mlp_of_layer_[static_cast<size_t>(l)] == moe_mlp_.get()) moe_mlp_->forward(l, step);
  }
}

// Every rank's [rows, vocab_rows] slice is gathered ([tp][rows][vocab_rows], rank-major) and
// copied into its columns of the [rows, vocab] logits, so every rank samples the full row.
void GpuDecoder::gather_logits(int32_t rows) {
  if (rows == 0) return;
  const size_t slice_bytes = static_cast<size_t>(rows) * static_cast<size_t>(vocab_rows_) * sizeof(float);
  tp_.comm->all_gather(ws_.local_logits, ws_.gathered_logits, slice_bytes, ctx_.stream);
  const size_t row_bytes = static_cast<size_t>(vocab_rows_) * sizeof(float);
  for (int r = 0; r < tp_.comm->size(); ++r) {
    TACHYON_CUDA_CHECK(cudaMemcpy2DAsync(ws_.logits + static_cast<size_t>(r) * vocab_rows_,
                                         static_cast<size_t>(config().vocab_size) * sizeof(float),
                                         reinterpret_cast<std::byte*>(ws_.gathered_logits) + r * slice_bytes,
                                         row_bytes, row_bytes, static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
                                         ctx_.stream));
  }
}

}  // namespace tachyon::model::gpu
