#include "tachyon/model/gpu/dense_attention.h"

#include <cmath>

#include "tachyon/kernels/cuda/attention.h"
#include "tachyon/kernels/cuda/rope_store_kv.h"
#include "tachyon/model/gpu_support.h"

namespace tachyon::model::gpu {

namespace kc = kernels::cuda;

DenseAttentionBlock::DenseAttentionBlock(BlockContext& context) : GpuBlock(context) {
  const std::string reason = dense_attention_gpu_unsupported(ctx_.config);
  TACHYON_CHECK(reason.empty()) << "the GPU attention block cannot serve this model: " << reason;
  TACHYON_CHECK(ctx_.limits.dcp.size == 1 && ctx_.limits.pcp_size == 1)
      << "context parallelism on GPUs is built for latent attention (its cache split by token, its prefill rows "
      << "split with one gather per layer); dense attention has neither yet";
}

LinearShape DenseAttentionBlock::qkv_shape() const {
  const ModelConfig& c = ctx_.config;
  return {c.q_size() + 2 * c.kv_size(), c.hidden_size};
}
LinearShape DenseAttentionBlock::o_shape() const { return {ctx_.config.hidden_size, ctx_.config.q_size()}; }

void DenseAttentionBlock::plan_workspace(WorkspacePlan& plan) {
  const ModelConfig& c = ctx_.config;
  const size_t T = static_cast<size_t>(ctx_.limits.max_tokens);
  const size_t q = static_cast<size_t>(c.q_size()), kv = static_cast<size_t>(c.kv_size());
  ctx_.ws.decode_scratch_bytes = kc::paged_decode_workspace_bytes(
      ctx_.limits.max_seqs, static_cast<int32_t>(c.num_attention_heads), static_cast<int32_t>(c.head_dim),
      ctx_.limits.max_model_len);
  plan.add(&ctx_.ws.qkv, T * (q + 2 * kv) * 2);
  plan.add(&ctx_.ws.q, T * q * 2);
  plan.add(&ctx_.ws.decode_scratch, ctx_.ws.decode_scratch_bytes);
}

void DenseAttentionBlock::add_gemm_problems(int64_t m, std::vector<kc::GemmProblem>& problems) const {
  const ModelConfig& c = ctx_.config;
  problems.push_back({m, qkv_shape().n, qkv_shape().k, kc::GemmOutputType::kBF16, c.qkv_bias});
  problems.push_back({m, o_shape().n, o_shape().k, kc::GemmOutputType::kBF16, c.o_proj_bias});
}

std::vector<RoleInfo> DenseAttentionBlock::roles() const {
  return {{LinearRole::kQkv, qkv_shape(), ctx_.ws.normed, qkv_shape().k},
          {LinearRole::kO, o_shape(), ctx_.ws.attn, o_shape().k}};
}

void DenseAttentionBlock::run_role(LinearRole role, int64_t layer, int64_t m) {
  const CudaLayerWeights& w = layer_weights(layer);
  Workspace& ws = ctx_.ws;
  if (role == LinearRole::kQkv) {
    ctx_.linear.linear(role, qkv_shape(), ws.qkv, GemmOutputType::kBF16, ws.normed, w.qkv, w.qkv_bias, m, ctx_.stream);
  } else if (role == LinearRole::kO) {
    ctx_.linear.linear(role, o_shape(), ws.proj, GemmOutputType::kBF16, ws.attn, w.o_proj,
                       ctx_.row_parallel_bias ? w.o_proj_bias : nullptr, m, ctx_.stream);
  }
}

std::optional<NormedProduct> DenseAttentionBlock::normed_product(int64_t layer) const {
  const CudaLayerWeights& w = layer_weights(layer);
  return NormedProduct{LinearRole::kQkv, qkv_shape(), w.qkv, w.qkv_bias, ctx_.ws.qkv};
}

std::vector<KvRegion> DenseAttentionBlock::kv_regions() const {
  const size_t values = static_cast<size_t>(ctx_.config.kv_size());
  if (ctx_.limits.fp8_kv_cache) {  // codes first: every layer's codes then stay 16-byte aligned (blocks of >= 2 tokens)
    const size_t factors = static_cast<size_t>(ctx_.config.num_key_value_heads) * sizeof(float);
    return {{"k", values, DType::kF8E4M3},
            {"v", values, DType::kF8E4M3},
            {"k_scale", factors, DType::kF32},
            {"v_scale", factors, DType::kF32}};
  }
  return {{"k", values * 2, DType::kBF16}, {"v", values * 2, DType::kBF16}};
}

void DenseAttentionBlock::forward(int64_t l, const GpuStep& step) {
  const ModelConfig& c = ctx_.config;
  const ForwardShape& shape = step.shape;
  const StepMetadata& m = step.metadata;
  const CudaLayerWeights& w = layer_weights(l);
  Workspace& ws = ctx_.ws;
  const int64_t T = shape.num_tokens;
  const kc::RopeStoreKvShape rope_shape{.num_tokens = T,
                                        .num_heads = static_cast<int32_t>(c.num_attention_heads),
                                        .num_kv_heads = static_cast<int32_t>(c.num_key_value_heads),
                                        .head_dim = static_cast<int32_t>(c.head_dim),
                                        .eps = static_cast<float>(c.rms_norm_eps)};
  const kc::AttentionParams attention{.num_heads = static_cast<int32_t>(c.num_attention_heads),
                                      .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                                      .sliding_window = static_cast<int32_t>(c.sliding_window.value_or(0))};
  run_normed_product(*normed_product(l), T);
  kc::PagedKvView kv{.block_tables = m.block_tables,
                     .block_table_stride = ctx_.limits.block_table_stride,
                     .block_size = ctx_.limits.block_size,
                     .num_kv_heads = static_cast<int32_t>(c.num_key_value_heads),
                     .head_dim = static_cast<int32_t>(c.head_dim)};
  if (ctx_.limits.fp8_kv_cache) {
    const kc::Fp8KvRows rows{.k = reinterpret_cast<uint8_t*>(ctx_.kv->bytes(l, 0)),
                             .v = reinterpret_cast<uint8_t*>(ctx_.kv->bytes(l, 1)),
                             .k_scale = reinterpret_cast<float*>(ctx_.kv->bytes(l, 2)),
                             .v_scale = reinterpret_cast<float*>(ctx_.kv->bytes(l, 3))};
    kc::rope_store_kv_fp8(ws.q, rows, ws.qkv, w.q_norm, w.k_norm, ctx_.weights.inv_freq(), m.positions, m.slots,
                          rope_shape, ctx_.stream);
    kv.fp8 = {.k = rows.k, .v = rows.v, .k_scale = rows.k_scale, .v_scale = rows.v_scale};
  } else {
    bf16* k_cache = ctx_.kv->region(l, 0);
    bf16* v_cache = ctx_.kv->region(l, 1);
    kc::rope_store_kv(ws.q, k_cache, v_cache, ws.qkv, w.q_norm, w.k_norm, ctx_.weights.inv_freq(), m.positions,
                      m.slots, rope_shape, ctx_.stream);
    kv.k_cache = k_cache;
    kv.v_cache = v_cache;
  }
  // Decodes come first in a plan: the decode kernel serves them (row s is sequence s), the
  // prefill kernel the rest, through views of the metadata that start at the first prefill.
  const int32_t decodes = shape.num_decode_seqs;
  if (decodes > 0) {
    kc::paged_decode_attention(ws.attn, ws.q, kv, m.context_lens, decodes, shape.max_context_len, attention,
                               ws.decode_scratch, ws.decode_scratch_bytes, ctx_.stream);
  }
  if (decodes < shape.num_seqs) {
    kc::PagedKvView prefill_kv = kv;
    prefill_kv.block_tables = m.block_tables + static_cast<size_t>(decodes) * ctx_.limits.block_table_stride;
    kc::paged_prefill_attention(ws.attn, ws.q, prefill_kv, m.query_starts + decodes, m.context_lens + decodes,
                                shape.num_seqs - decodes, static_cast<int32_t>(T), shape.max_query_len, attention,
                                ctx_.stream);
  }
  run_role(LinearRole::kO, l, T);
}

}  // namespace tachyon::model::gpu
