#include "tachyon/runner/cuda/cuda_model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <nvtx3/nvtx3.hpp>

#include "tachyon/dist/communicator.h"
#include "tachyon/kernels/cuda/activation.h"
#include "tachyon/kernels/cuda/attention.h"
#include "tachyon/kernels/cuda/dsa_indexer.h"
#include "tachyon/kernels/cuda/embedding.h"
#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/cuda/moe.h"
#include "tachyon/kernels/cuda/rms_norm.h"
#include "tachyon/kernels/cuda/rope_store_kv.h"
#include "tachyon/kernels/cuda/sampling.h"
#include "tachyon/model/attention_backend.h"
#include "tachyon/model/rope.h"
#include "tachyon/runner/cuda/cuda_runner_workspace.h"
#include "tachyon/runner/cuda/sampling_inputs.h"

namespace tachyon::runner {

namespace kc = kernels::cuda;

namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t value) { return (value + kAlign - 1) / kAlign * kAlign; }

}  // namespace


CudaModelRunner::CudaModelRunner(const model::Bf16ModelWeights& weights, const core::EngineConfig& config,
                                 CudaTpRank tp)
    : config_(config),
      tp_(tp),
      vocab_rows_(tp.vocab_rows > 0 ? tp.vocab_rows : weights.config.vocab_size),
      weights_(weights, model::rope_inv_freq(weights.config)) {
  TACHYON_CHECK(weights.embed_tokens.size() == static_cast<size_t>(vocab_rows_ * weights.config.hidden_size))
      << "internal: embed_tokens holds " << weights.embed_tokens.size() / weights.config.hidden_size
      << " rows, the TP rank expects " << vocab_rows_;
  TACHYON_CHECK(config.device.dtype == "bfloat16" && config.device.kv_cache_dtype == "bfloat16")
      << "the CUDA runner supports dtype and kv_cache_dtype bfloat16, got " << config.device.dtype << " and "
      << config.device.kv_cache_dtype;
  const model::ModelConfig& c = weights_.config();
  if (c.is_mla()) {
    TACHYON_CHECK(!tensor_parallel()) << "tensor parallelism of latent-attention (DeepSeek) models is not built yet";
    TACHYON_CHECK(c.kv_lora_rank % 8 == 0 && c.kv_lora_rank <= 512 && c.qk_rope_head_dim % 8 == 0 &&
                  c.qk_rope_head_dim <= 64)
        << "the CUDA latent-attention kernels take kv_lora_rank a multiple of 8 up to 512 and qk_rope_head_dim a "
        << "multiple of 8 up to 64; this model has " << c.kv_lora_rank << " and " << c.qk_rope_head_dim;
    TACHYON_CHECK(!c.has_sparse_attention() || (c.q_lora_rank > 0 && c.index_head_dim % 8 == 0 &&
                                                c.index_head_dim <= 128 && c.index_n_heads <= 256))
        << "the CUDA indexer kernels take index_head_dim a multiple of 8 up to 128, at most 256 index heads and a q "
        << "LoRA; this model has " << c.index_head_dim << ", " << c.index_n_heads << " and q_lora_rank " << c.q_lora_rank;
    head_gemm_ = std::make_unique<kc::HeadGemm>();
    rope_attention_scaling_ = static_cast<float>(model::rope_attention_scaling(c));
    mla_softmax_scale_ = model::mla_attention_shape(c, 1, 0).scale;
    if (c.has_sparse_attention()) {
      dsa_score_scale_ = model::dsa_indexer_shape(c, 1, 0).scale;
      dsa_weight_scale_ = static_cast<float>(std::pow(static_cast<double>(c.index_n_heads), -0.5));
    }
  } else {
    TACHYON_CHECK(c.head_dim == 64 || c.head_dim == 128 || c.head_dim == 256)
        << "the CUDA attention kernels need head_dim 64, 128 or 256; this model has " << c.head_dim;
  }
  if (c.is_moe()) {
    TACHYON_CHECK(c.num_experts <= kc::kMoeMaxExperts && c.num_experts_per_tok <= 16 && c.moe_intermediate_size % 8 == 0)
        << "the CUDA MoE kernels take at most " << kc::kMoeMaxExperts << " experts, top-16, and a moe_intermediate_size "
        << "that is a multiple of 8; this model has " << c.num_experts << ", top-" << c.num_experts_per_tok << ", "
        << c.moe_intermediate_size;
  }
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  TACHYON_CUDA_CHECK(cudaEventCreate(&step_begin_));
  TACHYON_CUDA_CHECK(cudaEventCreate(&step_end_));
  graph_batch_sizes_ = cuda_graph_batch_sizes(config);
  plan_roles();
  plan_workspace(config);
  tune_gemms(config);
  allocate_kv_cache(config);
  choose_gemv();
  if (!config.device.enforce_eager) capture_graphs();
}

CudaModelRunner::~CudaModelRunner() {
  for (auto& [batch, graph] : graphs_) cudaGraphExecDestroy(graph);
  if (step_begin_ != nullptr) cudaEventDestroy(step_begin_);
  if (step_end_ != nullptr) cudaEventDestroy(step_end_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

bool CudaModelRunner::tensor_parallel() const { return tp_.comm != nullptr; }

void CudaModelRunner::all_reduce_hidden(bf16* data, int64_t rows) {
  if (!tensor_parallel() || rows == 0) return;
  tp_.comm->all_reduce(data, data, static_cast<size_t>(rows * weights_.config().hidden_size), dist::ReduceType::kBF16,
                       stream_);
}

bool CudaModelRunner::has_dense_mlp() const {
  const model::ModelConfig& c = weights_.config();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.is_moe_layer(l)) return true;
  }
  return false;
}

// The experts of a mixture-of-experts layer (kernels/cuda/moe.h): route, group the (token,
// expert) pairs by expert, the two grouped GEMMs around SiLU, then the weighted sum into
// ws_->proj, where the dense MLP's output would be. Sizes come from T alone, so this is
// captured in the decode graphs like the rest of the layer.
void CudaModelRunner::moe_mlp(const CudaLayerWeights& w, int64_t layer, int64_t T) {
  const model::ModelConfig& c = weights_.config();
  const int64_t H = c.hidden_size, I = c.moe_intermediate_size;
  const int32_t E = static_cast<int32_t>(c.num_experts), k = static_cast<int32_t>(c.num_experts_per_tok);
  const int64_t pairs = T * k, capacity = kc::moe_sorted_capacity(pairs, E);
  run_role(Role::kRouter, layer, T);
  if (c.router == model::RouterKind::kSigmoidGroupLimited) {
    kc::moe_topk_sigmoid_grouped(ws_->topk_ids, ws_->topk_weights, ws_->router_logits, w.router_bias, T, E, k,
                                 static_cast<int32_t>(c.n_group), static_cast<int32_t>(c.topk_group), c.norm_topk_prob,
                                 static_cast<float>(c.routed_scaling_factor), stream_);
  } else {
    kc::moe_topk_softmax(ws_->topk_ids, ws_->topk_weights, ws_->router_logits, T, E, k, c.norm_topk_prob, stream_);
  }
  kc::moe_align(ws_->sorted_rows, ws_->block_expert, ws_->topk_ids, pairs, E, capacity, stream_);
  // Up to 8 tokens (decode) no expert has more than T pairs: the grouped GEMV streams each active
  // expert's weights once at HBM bandwidth, where a 64-row tensor-core tile would be padding.
  if (T <= 8) {
    const int32_t max_pairs = static_cast<int32_t>(T);
    kc::moe_grouped_gemv(ws_->expert_gate_up, ws_->normed, w.experts_gate_up, ws_->sorted_rows, ws_->block_expert,
                         capacity, k, 2 * I, H, max_pairs, stream_);
    kc::silu_and_mul(ws_->expert_act, ws_->expert_gate_up, pairs, I, stream_);
    kc::moe_grouped_gemv(ws_->expert_down, ws_->expert_act, w.experts_down, ws_->sorted_rows, ws_->block_expert,
                         capacity, 1, H, I, max_pairs, stream_);
  } else {
    kc::moe_grouped_gemm(ws_->expert_gate_up, ws_->normed, w.experts_gate_up, ws_->sorted_rows, ws_->block_expert,
                         capacity, k, 2 * I, H, stream_);
    kc::silu_and_mul(ws_->expert_act, ws_->expert_gate_up, pairs, I, stream_);
    kc::moe_grouped_gemm(ws_->expert_down, ws_->expert_act, w.experts_down, ws_->sorted_rows, ws_->block_expert,
                         capacity, 1, H, I, stream_);
  }
  // DeepSeek's shared expert: a dense MLP every token runs, added in the combine's pass.
  const bf16* shared = nullptr;
  if (w.shared_gate_up != nullptr) {
    run_role(Role::kSharedGateUp, layer, T);
    run_role(Role::kSharedDownWithSilu, layer, T);
    shared = ws_->shared_out;
  }
  kc::moe_combine(ws_->proj, ws_->expert_down, ws_->topk_weights, shared, T, k, H, stream_);
}

void CudaModelRunner::plan_workspace(const core::EngineConfig& config) {
  const model::ModelConfig& c = weights_.config();
  const core::SchedulerConfig& s = config.scheduler;
  limits_.max_seqs = static_cast<int32_t>(s.max_num_seqs);
  limits_.max_tokens = static_cast<int32_t>(std::max(s.max_num_batched_tokens, s.max_num_seqs));
  limits_.max_blocks_per_seq = static_cast<int32_t>((s.max_model_len + config.block_size - 1) / config.block_size);
  limits_.sampling_row_bytes = sizeof(kc::SamplingRow);
  layout_ = StepInputLayout::make(limits_);
  // The variable tail holds the token histories of rows with penalties (at most every token of
  // every sequence) and the ids min_tokens masks (stop_token_ids, bounded at the door, + EOS).
  staging_bytes_ = layout_.variable + static_cast<size_t>(s.max_num_seqs) *
                                          (static_cast<size_t>(s.max_model_len) + core::kMaxStopTokenIds + 1) *
                                          sizeof(int32_t);
  staging_host_ = cuda::PinnedBuffer(staging_bytes_);
  staging_device_ = cuda::DeviceBuffer(staging_bytes_);
  sampled_host_ = cuda::PinnedBuffer(static_cast<size_t>(limits_.max_seqs) * sizeof(kc::SampledRow));

  const size_t T = static_cast<size_t>(limits_.max_tokens), S = static_cast<size_t>(limits_.max_seqs);
  const size_t hidden = static_cast<size_t>(c.hidden_size), inter = static_cast<size_t>(c.intermediate_size);
  const size_t q = static_cast<size_t>(c.q_size()), kv = static_cast<size_t>(c.kv_size());
  const size_t heads = static_cast<size_t>(c.num_attention_heads);
  const size_t attn_width = std::max(q, heads * static_cast<size_t>(c.value_head_dim()));
  ws_ = std::make_unique<Workspace>();
  ws_->decode_scratch_bytes = kc::paged_decode_workspace_bytes(limits_.max_seqs, static_cast<int32_t>(c.num_attention_heads),
                                                               static_cast<int32_t>(c.head_dim),
                                                               static_cast<int32_t>(s.max_model_len));
  ws_->sampler_scratch_bytes = kc::sampling_workspace_bytes(limits_.max_seqs, static_cast<int32_t>(c.vocab_size));
  size_t offset = 0;
  std::vector<std::pair<void**, size_t>> carve = {
      {reinterpret_cast<void**>(&ws_->residual), T * hidden * 2},
      {reinterpret_cast<void**>(&ws_->normed), T * hidden * 2},
      {reinterpret_cast<void**>(&ws_->qkv), T * (q + 2 * kv) * 2},
      {reinterpret_cast<void**>(&ws_->q), T * q * 2},
      {reinterpret_cast<void**>(&ws_->attn), T * attn_width * 2},
      {reinterpret_cast<void**>(&ws_->proj), T * hidden * 2},
      {reinterpret_cast<void**>(&ws_->gate_up), T * 2 * inter * 2},
      {reinterpret_cast<void**>(&ws_->act), T * inter * 2},
      {reinterpret_cast<void**>(&ws_->selected), S * hidden * 2},
      {reinterpret_cast<void**>(&ws_->logits), S * static_cast<size_t>(c.vocab_size) * 4},
      {reinterpret_cast<void**>(&ws_->local_logits), tensor_parallel() ? S * static_cast<size_t>(vocab_rows_) * 4 : 0},
      {reinterpret_cast<void**>(&ws_->gathered_logits),
       tensor_parallel() ? static_cast<size_t>(tp_.comm->size()) * S * static_cast<size_t>(vocab_rows_) * 4 : 0},
      {&ws_->decode_scratch, ws_->decode_scratch_bytes},
      {&ws_->sampler_scratch, ws_->sampler_scratch_bytes},
      {reinterpret_cast<void**>(&ws_->sampled), S * sizeof(kc::SampledRow)},
  };
  if (c.is_moe()) {
    const size_t E = static_cast<size_t>(c.num_experts), k = static_cast<size_t>(c.num_experts_per_tok);
    const size_t pairs = T * k, moe_inter = static_cast<size_t>(c.moe_intermediate_size);
    const size_t capacity = static_cast<size_t>(kc::moe_sorted_capacity(static_cast<int64_t>(pairs), static_cast<int32_t>(E)));
    carve.push_back({reinterpret_cast<void**>(&ws_->router_logits), T * E * 4});
    carve.push_back({reinterpret_cast<void**>(&ws_->topk_ids), pairs * 4});
    carve.push_back({reinterpret_cast<void**>(&ws_->topk_weights), pairs * 4});
    carve.push_back({reinterpret_cast<void**>(&ws_->sorted_rows), capacity * 4});
    carve.push_back({reinterpret_cast<void**>(&ws_->block_expert), capacity / kc::kMoeBlockM * 4});
    carve.push_back({reinterpret_cast<void**>(&ws_->expert_gate_up), pairs * 2 * moe_inter * 2});
    carve.push_back({reinterpret_cast<void**>(&ws_->expert_act), pairs * moe_inter * 2});
    carve.push_back({reinterpret_cast<void**>(&ws_->expert_down), pairs * hidden * 2});
    const size_t shared_inter = moe_inter * static_cast<size_t>(c.n_shared_experts);
    carve.push_back({reinterpret_cast<void**>(&ws_->shared_gate_up), T * 2 * shared_inter * 2});
    carve.push_back({reinterpret_cast<void**>(&ws_->shared_act), T * shared_inter * 2});
    carve.push_back({reinterpret_cast<void**>(&ws_->shared_out), shared_inter > 0 ? T * hidden * 2 : 0});
  }
  if (c.is_mla()) {
    const size_t rank = static_cast<size_t>(c.kv_lora_rank), rope = static_cast<size_t>(c.qk_rope_head_dim);
    const size_t qk = static_cast<size_t>(c.qk_nope_head_dim) + rope;
    // One scratch holds the larger of the two kernels' partials (sparse: steps of max_tokens
    // tokens over index_topk kept entries; the size stops growing past a few waves of tokens).
    ws_->mla_split_scratch_bytes = kc::mla_decode_workspace_bytes(
        limits_.max_seqs, static_cast<int32_t>(heads), static_cast<int32_t>(rank), static_cast<int32_t>(s.max_model_len));
    if (c.has_sparse_attention()) {
      ws_->mla_split_scratch_bytes =
          std::max(ws_->mla_split_scratch_bytes,
                   kc::sparse_mla_workspace_bytes(limits_.max_tokens, static_cast<int32_t>(heads),
                                                  static_cast<int32_t>(rank), static_cast<int32_t>(c.index_topk)));
    }
    carve.push_back({reinterpret_cast<void**>(&ws_->q_lora), T * static_cast<size_t>(c.q_lora_rank) * 2});
    carve.push_back({reinterpret_cast<void**>(&ws_->q_full), T * heads * qk * 2});
    carve.push_back({reinterpret_cast<void**>(&ws_->kv_a), T * (rank + rope) * 2});
    carve.push_back({reinterpret_cast<void**>(&ws_->q_absorbed), T * heads * (rank + rope) * 2});
    carve.push_back({reinterpret_cast<void**>(&ws_->attn_latent), T * heads * rank * 2});
    carve.push_back({&ws_->mla_split_scratch, ws_->mla_split_scratch_bytes});
  }
  if (c.has_sparse_attention()) {
    // The scores hold one f32 per (new token, cached token): T * max_model_len, the price of an
    // exact top-k over any context (4 GiB at 8K tokens of 128K contexts).
    const size_t index_heads = static_cast<size_t>(c.index_n_heads), index_dim = static_cast<size_t>(c.index_head_dim);
    const size_t max_len = static_cast<size_t>(s.max_model_len);
    ws_->topk_scratch_bytes = kc::dsa_topk_workspace_bytes(limits_.max_tokens, static_cast<int32_t>(max_len),
                                                           static_cast<int32_t>(c.index_topk));
    carve.push_back({reinterpret_cast<void**>(&ws_->index_q), T * index_heads * index_dim * 2});
    carve.push_back({reinterpret_cast<void**>(&ws_->index_weights), T * index_heads * 4});
    carve.push_back({reinterpret_cast<void**>(&ws_->index_k), T * index_dim * 2});
    carve.push_back({reinterpret_cast<void**>(&ws_->index_scores), T * max_len * 4});
    carve.push_back({reinterpret_cast<void**>(&ws_->kept), T * static_cast<size_t>(c.index_topk) * 4});
    carve.push_back({&ws_->topk_scratch, ws_->topk_scratch_bytes});
  }
  std::vector<size_t> offsets;
  for (auto& [ptr, bytes] : carve) {
    offsets.push_back(offset);
    offset = align_up(offset + bytes);
  }
  workspace_buffer_ = cuda::DeviceBuffer(offset);
  for (size_t i = 0; i < carve.size(); ++i) {
    *carve[i].first = static_cast<std::byte*>(workspace_buffer_.data()) + offsets[i];
  }

}

void CudaModelRunner::allocate_kv_cache(const core::EngineConfig& config) {
  // The KV cache takes what gpu_memory_utilization leaves after weights, workspace, staging
  // and the GEMM workspace (all allocated by now), minus a margin for graphs and cuBLASLt.
  const model::ModelConfig& c = weights_.config();
  const cuda::DeviceMemoryInfo memory = cuda::device_memory_info();
  const double budget = config.device.gpu_memory_utilization * static_cast<double>(memory.total);
  const double used = static_cast<double>(memory.total - memory.free);
  const double margin = 512.0 * (1 << 20);
  // Per layer and block, bf16: region 0 holds K (or MLA's [c_kv | k_pe] latents), region 1 V (or
  // DSA's index keys; none for MLA without DSA).
  const size_t tokens = static_cast<size_t>(config.block_size);
  size_t region_block_bytes[2];
  if (c.is_mla()) {
    region_block_bytes[0] = tokens * static_cast<size_t>(c.kv_lora_rank + c.qk_rope_head_dim) * 2;
    region_block_bytes[1] = c.has_sparse_attention() ? tokens * static_cast<size_t>(c.index_head_dim) * 2 : 0;
  } else {
    region_block_bytes[0] = region_block_bytes[1] = tokens * static_cast<size_t>(c.kv_size()) * 2;
  }
  const size_t block_bytes = (region_block_bytes[0] + region_block_bytes[1]) * static_cast<size_t>(c.num_hidden_layers);
  const double available = budget - used - margin;
  TACHYON_CHECK(available > static_cast<double>(block_bytes) * limits_.max_blocks_per_seq)
      << "not enough GPU memory for the KV cache of one max_model_len sequence: " << memory.free / (1 << 20)
      << " MiB free of " << memory.total / (1 << 20) << " MiB after loading " << weights_.bytes() / (1 << 20)
      << " MiB of weights; raise --gpu-memory-utilization or lower --max-num-batched-tokens / --max-model-len";
  num_blocks_ = static_cast<int32_t>(std::min(available / static_cast<double>(block_bytes), 2.0e9));
  for (int r = 0; r < 2; ++r) cache_region_bytes_[r] = static_cast<size_t>(num_blocks_) * region_block_bytes[r];
  kv_buffer_ = cuda::DeviceBuffer((cache_region_bytes_[0] + cache_region_bytes_[1]) *
                                  static_cast<size_t>(c.num_hidden_layers));
}

bf16* CudaModelRunner::cache_region(int64_t layer, int region) const {
  const size_t offset = static_cast<size_t>(layer) * (cache_region_bytes_[0] + cache_region_bytes_[1]) +
                        (region == 1 ? cache_region_bytes_[0] : 0);
  return reinterpret_cast<bf16*>(static_cast<std::byte*>(kv_buffer_.data()) + offset);
}


// The attention block of a q/k/v model, from ws_->normed to o_proj's output in ws_->proj.
void CudaModelRunner::dense_attention(const CudaLayerWeights& w, int64_t l, const ForwardShape& shape,
                                      const StepMetadata& m) {
  const model::ModelConfig& c = weights_.config();
  const int64_t T = shape.num_tokens;
  const kc::RopeStoreKvShape rope_shape{.num_tokens = T,
                                        .num_heads = static_cast<int32_t>(c.num_attention_heads),
                                        .num_kv_heads = static_cast<int32_t>(c.num_key_value_heads),
                                        .head_dim = static_cast<int32_t>(c.head_dim),
                                        .eps = static_cast<float>(c.rms_norm_eps)};
  const kc::AttentionParams attention{.num_heads = static_cast<int32_t>(c.num_attention_heads),
                                      .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                                      .sliding_window = static_cast<int32_t>(c.sliding_window.value_or(0))};
  run_role(Role::kQkv, l, T);
  bf16* k_cache = cache_region(l, 0);
  bf16* v_cache = cache_region(l, 1);
  kc::rope_store_kv(ws_->q, k_cache, v_cache, ws_->qkv, w.q_norm, w.k_norm, weights_.inv_freq(), m.positions, m.slots,
                    rope_shape, stream_);
  const kc::PagedKvView kv{.k_cache = k_cache,
                           .v_cache = v_cache,
                           .block_tables = m.block_tables,
                           .block_table_stride = layout_.block_table_stride,
                           .block_size = config_.block_size,
                           .num_kv_heads = static_cast<int32_t>(c.num_key_value_heads),
                           .head_dim = static_cast<int32_t>(c.head_dim)};
  // Decodes come first in a plan: the decode kernel serves them (row s is sequence s), the
  // prefill kernel the rest, through views of the metadata that start at the first prefill.
  const int32_t decodes = shape.num_decode_seqs;
  if (decodes > 0) {
    kc::paged_decode_attention(ws_->attn, ws_->q, kv, m.context_lens, decodes, shape.max_context_len, attention,
                               ws_->decode_scratch, ws_->decode_scratch_bytes, stream_);
  }
  if (decodes < shape.num_seqs) {
    kc::PagedKvView prefill_kv = kv;
    prefill_kv.block_tables = m.block_tables + static_cast<size_t>(decodes) * layout_.block_table_stride;
    kc::paged_prefill_attention(ws_->attn, ws_->q, prefill_kv, m.query_starts + decodes, m.context_lens + decodes,
                                shape.num_seqs - decodes, static_cast<int32_t>(T), shape.max_query_len, attention,
                                stream_);
  }
  run_role(Role::kO, l, T);
}

void CudaModelRunner::forward(const ForwardShape& shape) {
  const model::ModelConfig& c = weights_.config();
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t T = shape.num_tokens, H = c.hidden_size;
  std::byte* staging = static_cast<std::byte*>(staging_device_.data());
  const auto* token_ids = reinterpret_cast<const int32_t*>(staging + layout_.token_ids);
  const auto* logits_rows = reinterpret_cast<const int32_t*>(staging + layout_.logits_rows);
  auto field = [&](size_t offset) { return reinterpret_cast<const int32_t*>(staging + offset); };
  const StepMetadata metadata{field(layout_.positions), field(layout_.slot_mapping), field(layout_.context_lens),
                              field(layout_.query_starts), field(layout_.block_tables)};

  kc::embedding_shard(ws_->residual, token_ids, weights_.embed_tokens(), T, H, tp_.vocab_begin, vocab_rows_, stream_);
  all_reduce_hidden(ws_->residual, T);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const CudaLayerWeights& w = weights_.layers()[static_cast<size_t>(l)];
    // Attention block: the previous MLP's output joins the residual inside the norm.
    if (l == 0) {
      kc::rms_norm(ws_->normed, ws_->residual, w.input_norm, T, H, eps, stream_);
    } else {
      kc::add_rms_norm(ws_->normed, ws_->residual, ws_->proj, w.input_norm, T, H, eps, stream_);
    }
    if (c.is_mla()) {
      mla_attention(w, l, shape, metadata);
    } else {
      dense_attention(w, l, shape, metadata);
    }
    all_reduce_hidden(ws_->proj, T);
    // MLP block.
    kc::add_rms_norm(ws_->normed, ws_->residual, ws_->proj, w.post_attention_norm, T, H, eps, stream_);
    if (c.is_moe_layer(l)) {
      moe_mlp(w, l, T);
    } else {
      run_role(Role::kGateUp, l, T);
      run_role(Role::kDownWithSilu, l, T);
    }
    all_reduce_hidden(ws_->proj, T);
  }
  // Final norm on every row (cheap), then only the rows whose logits are wanted go through the
  // LM head: gathered by the embedding kernel, a row lookup by index.
  kc::add_rms_norm(ws_->normed, ws_->residual, ws_->proj, weights_.final_norm(), T, H, eps, stream_);
  kc::embedding(ws_->selected, logits_rows, ws_->normed, shape.num_logits_rows, H, stream_);
  run_role(Role::kLmHead, -1, shape.num_logits_rows);
  if (tensor_parallel()) gather_logits(shape.num_logits_rows);
}

// Every rank's [rows, vocab_rows] slice is gathered ([tp][rows][vocab_rows], rank-major) and
// copied into its columns of the [rows, vocab] logits, so every rank samples the full row.
void CudaModelRunner::gather_logits(int32_t rows) {
  if (rows == 0) return;
  const size_t slice_bytes = static_cast<size_t>(rows) * static_cast<size_t>(vocab_rows_) * sizeof(float);
  tp_.comm->all_gather(ws_->local_logits, ws_->gathered_logits, slice_bytes, stream_);
  const size_t row_bytes = static_cast<size_t>(vocab_rows_) * sizeof(float);
  for (int r = 0; r < tp_.comm->size(); ++r) {
    TACHYON_CUDA_CHECK(cudaMemcpy2DAsync(ws_->logits + static_cast<size_t>(r) * vocab_rows_,
                                         static_cast<size_t>(weights_.config().vocab_size) * sizeof(float),
                                         reinterpret_cast<std::byte*>(ws_->gathered_logits) + r * slice_bytes,
                                         row_bytes, row_bytes, static_cast<size_t>(rows), cudaMemcpyDeviceToDevice,
                                         stream_));
  }
}

std::vector<float> CudaModelRunner::last_logits(int32_t rows) const {
  std::vector<float> logits(static_cast<size_t>(rows) * static_cast<size_t>(weights_.config().vocab_size));
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  TACHYON_CUDA_CHECK(cudaMemcpy(logits.data(), ws_->logits, logits.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return logits;
}

void CudaModelRunner::capture_graphs() {
  // One graph per decode bucket, captured with the bucket's batch and the model's maximum
  // context (which fixes the decode kernel's split count), replayed for any decode step whose
  // batch fits: the padding rows compute on token 0 and write nothing (slot -1, context 0).
  const int32_t max_context = static_cast<int32_t>(config_.scheduler.max_model_len);
  for (int32_t batch : graph_batch_sizes_) {
    const StepInputSummary summary = fill_step_inputs(core::StepPlan{}, layout_, limits_,
                                                      static_cast<std::byte*>(staging_host_.data()), batch);
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(staging_device_.data(), staging_host_.data(), summary.bytes_used,
                                       cudaMemcpyHostToDevice, stream_));
    const ForwardShape shape{batch, batch, batch, 1, max_context, batch};
    forward(shape);  // eager first: cuBLASLt loads its kernels outside the capture
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
    cudaGraph_t graph = nullptr;
    TACHYON_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    forward(shape);
    TACHYON_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    TACHYON_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    TACHYON_CUDA_CHECK(cudaGraphDestroy(graph));
    graphs_[batch] = exec;
  }
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaModelRunner::launch(const core::StepPlan& plan) {
  TACHYON_CHECK(!pending_) << "internal: launch() while a step is in flight; call wait() first";
  TACHYON_CHECK(!plan.has_drafts()) << "the CUDA runner does not verify draft tokens yet: speculative decoding runs "
                                    << "on the CPU runner only";
  PendingStep step;
  for (const core::ScheduledSequence& s : plan.sequences) {
    if (s.sample) step.sequence_ids.push_back(s.sequence_id);
  }
  step.ran = !plan.empty();
  if (plan.empty()) {
    pending_ = std::move(step);
    return;
  }
  // A named range per step, so a profiler (ncu --nvtx-include "tachyon_step/") sees only steps.
  nvtx3::scoped_range range("tachyon_step");
  std::byte* staging = static_cast<std::byte*>(staging_host_.data());
  // A decode step is padded to its batch bucket and replays that bucket's graph. With
  // --enforce-eager it is padded the same way and runs eagerly, so graphs and eager run the
  // same kernels on the same shapes and give the same tokens. The rest run eagerly as planned.
  cudaGraphExec_t graph = nullptr;
  int32_t padded = 0;
  if (is_decode_only(plan)) {
    auto bucket = std::lower_bound(graph_batch_sizes_.begin(), graph_batch_sizes_.end(),
                                   static_cast<int32_t>(plan.sequences.size()));
    if (bucket != graph_batch_sizes_.end()) {
      padded = *bucket;
      auto captured = graphs_.find(padded);
      if (captured != graphs_.end()) graph = captured->second;
    }
  }
  const StepInputSummary summary = fill_step_inputs(plan, layout_, limits_, staging, padded);

  // Sampling rows at their fixed offset; token histories (penalties only) in the variable tail.
  step.sampling = build_sampling_inputs(plan);
  const SamplingInputs& sampling = step.sampling;
  TACHYON_CHECK(static_cast<int32_t>(sampling.rows.size()) == summary.num_sampled)
      << "internal: " << sampling.rows.size() << " sampling rows for " << summary.num_sampled << " sampled sequences";
  std::copy(sampling.rows.begin(), sampling.rows.end(), reinterpret_cast<kc::SamplingRow*>(staging + layout_.sampling_rows));
  size_t upload = summary.bytes_used;
  if (!sampling.tokens.empty()) {
    const size_t token_bytes = sampling.tokens.size() * sizeof(int32_t);
    TACHYON_CHECK(layout_.variable + token_bytes <= staging_bytes_) << "internal: sampling histories overflow staging";
    std::copy(sampling.tokens.begin(), sampling.tokens.end(), reinterpret_cast<int32_t*>(staging + layout_.variable));
    upload = layout_.variable + token_bytes;
  }
  TACHYON_CUDA_CHECK(cudaEventRecord(step_begin_, stream_));
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(staging_device_.data(), staging, upload, cudaMemcpyHostToDevice, stream_));

  if (graph != nullptr) {
    TACHYON_CUDA_CHECK(cudaGraphLaunch(graph, stream_));
    ++graph_replays_;
  } else {
    ForwardShape shape{summary.num_tokens,    summary.num_seqs,        summary.num_logits_rows,
                       summary.max_query_len, summary.max_context_len, summary.num_decode_seqs};
    // A padded decode step (--enforce-eager, or a bucket without a graph) runs with the context
    // bound its graph is captured with: that bound sets the decode kernels' KV split count, and a
    // different count sums in a different order (seen as graph/eager token differences).
    if (padded > 0) shape.max_context_len = static_cast<int32_t>(config_.scheduler.max_model_len);
    forward(shape);
  }

  std::byte* device_staging = static_cast<std::byte*>(staging_device_.data());
  kc::sample(ws_->sampled, ws_->logits, reinterpret_cast<const kc::SamplingRow*>(device_staging + layout_.sampling_rows),
             reinterpret_cast<const int32_t*>(device_staging + layout_.variable), summary.num_sampled,
             static_cast<int32_t>(weights_.config().vocab_size), ws_->sampler_scratch, ws_->sampler_scratch_bytes,
             stream_);
  const size_t sampled_bytes = static_cast<size_t>(summary.num_sampled) * sizeof(kc::SampledRow);
  TACHYON_CUDA_CHECK(cudaMemcpyAsync(sampled_host_.data(), ws_->sampled, sampled_bytes, cudaMemcpyDeviceToHost, stream_));
  TACHYON_CUDA_CHECK(cudaEventRecord(step_end_, stream_));
  pending_ = std::move(step);
}

core::StepOutput CudaModelRunner::wait() {
  TACHYON_CHECK(pending_) << "internal: wait() without a launched step";
  PendingStep step = std::move(*pending_);
  pending_.reset();
  core::StepOutput output;
  if (!step.ran) return output;
  // The staging buffer is rewritten by the next launch only after this sync: the H2D copy that
  // reads it is ordered before the D2H on the same stream.
  TACHYON_CUDA_CHECK(cudaEventSynchronize(step_end_));
  float device_ms = 0.0f;
  TACHYON_CUDA_CHECK(cudaEventElapsedTime(&device_ms, step_begin_, step_end_));
  last_step_device_ms_ = device_ms;

  const auto* rows = sampled_host_.as<kc::SampledRow>();
  output.sequences.reserve(step.sequence_ids.size());
  for (size_t r = 0; r < step.sequence_ids.size(); ++r) {
    TACHYON_CHECK(rows[r].token >= 0) << "the model produced no finite logit for a sequence (NaN or -inf everywhere)";
    output.sequences.push_back({step.sequence_ids[r], {to_sampled_token(rows[r], step.sampling.rows[r])}, 0});
  }
  return output;
}

}  // namespace tachyon::runner
