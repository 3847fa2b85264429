#include "tachyon/model/gpu/sparse_selector.h"

#include <cmath>

#include "tachyon/dist/communicator.h"
#include "tachyon/kernels/cuda/dcp_attention.h"
#include "tachyon/kernels/cuda/dsa_indexer.h"
#include "tachyon/model/attention_backend.h"

namespace tachyon::model::gpu {

namespace kc = kernels::cuda;

SparseSelector::SparseSelector(BlockContext& context, float rope_attention_scaling)
    : ctx_(context),
      rope_attention_scaling_(rope_attention_scaling),
      score_scale_(dsa_indexer_shape(context.config, 1, 0).scale),
      weight_scale_(static_cast<float>(std::pow(static_cast<double>(context.config.index_n_heads), -0.5))) {}

void SparseSelector::plan_workspace(WorkspacePlan& plan) {
  // The scores hold one f32 per (new token, cached token): T * max_model_len, the price of an
  // exact top-k over any context (4 GiB at 8K tokens of 128K contexts).
  const ModelConfig& c = ctx_.config;
  Workspace& ws = ctx_.ws;
  const size_t T = static_cast<size_t>(ctx_.limits.max_tokens);
  const size_t index_heads = static_cast<size_t>(c.index_n_heads), index_dim = static_cast<size_t>(c.index_head_dim);
  const size_t max_len = static_cast<size_t>(ctx_.limits.max_model_len);
  ws.topk_scratch_bytes = kc::dsa_topk_workspace_bytes(ctx_.limits.max_tokens, static_cast<int32_t>(max_len),
                                                       static_cast<int32_t>(c.index_topk));
  plan.add(&ws.index_q, T * index_heads * index_dim * 2);
  plan.add(&ws.index_weights, T * index_heads * 4);
  plan.add(&ws.index_k, T * index_dim * 2);
  plan.add(&ws.index_scores, T * max_len * 4);
  plan.add(&ws.kept, T * static_cast<size_t>(c.index_topk) * 4);
  plan.add(&ws.topk_scratch, ws.topk_scratch_bytes);
  if (ctx_.limits.pcp_size > 1) plan.add(&ws.pcp_index_k, T * index_dim * 2);
  if (ctx_.limits.dcp.size > 1) {
    const size_t candidates = T * static_cast<size_t>(c.index_topk) * sizeof(kc::DcpCandidate);
    plan.add(&ws.dcp_candidates, candidates);
    plan.add(&ws.dcp_gathered_candidates, static_cast<size_t>(ctx_.limits.dcp.size) * candidates);
  }
}

void SparseSelector::add_gemm_problems(int64_t m, std::vector<kc::GemmProblem>& problems) const {
  const ModelConfig& c = ctx_.config;
  problems.push_back({m, c.index_n_heads * c.index_head_dim, c.q_lora_rank, kc::GemmOutputType::kBF16, false});
  problems.push_back({m, c.index_head_dim, c.hidden_size, kc::GemmOutputType::kBF16, false});
  problems.push_back({m, c.index_n_heads, c.hidden_size, kc::GemmOutputType::kF32, false});
}

std::vector<KvRegion> SparseSelector::kv_regions() const {
  const size_t dim = static_cast<size_t>(ctx_.config.index_head_dim);
  if (ctx_.limits.fp8_kv_cache) return {{"index_key_codes", dim, DType::kF8E4M3}, {"index_key_scales", 4, DType::kF32}};
  return {{"index_keys", dim * 2, DType::kBF16}};
}

void SparseSelector::select(int64_t l, const GpuStep& step, const IndexKeyCache& key_cache) {
  const int64_t T = step.shape.num_tokens;
  project_keys(l, T);
  store_keys(l, ctx_.ws.index_k, step.metadata.positions, step.metadata.slots, T, key_cache);
  select_stored(l, step, key_cache);
}

void SparseSelector::project_keys(int64_t l, int64_t m) {
  const ModelConfig& c = ctx_.config;
  const CudaLayerWeights& w = ctx_.weights.layers()[static_cast<size_t>(l)];
  ctx_.linear.gemm(ctx_.ws.index_k, GemmOutputType::kBF16, ctx_.ws.normed, w.indexer_wk, nullptr, m, c.index_head_dim,
                   c.hidden_size, ctx_.stream);
}

void SparseSelector::store_keys(int64_t l, const bf16* k_raw, const int32_t* positions, const int32_t* slots, int64_t n,
                                const IndexKeyCache& key_cache) {
  const ModelConfig& c = ctx_.config;
  const CudaLayerWeights& w = ctx_.weights.layers()[static_cast<size_t>(l)];
  const auto dim = static_cast<int32_t>(c.index_head_dim), rope = static_cast<int32_t>(c.qk_rope_head_dim);
  if (key_cache.codes != nullptr) {
    kc::dsa_store_index_keys_fp8(key_cache.codes, key_cache.scales, k_raw, w.indexer_k_norm, w.indexer_k_norm_bias,
                                 ctx_.weights.inv_freq(), rope_attention_scaling_, positions, slots, n, dim, rope,
                                 ctx_.stream);
  } else {
    kc::dsa_store_index_keys(key_cache.keys, k_raw, w.indexer_k_norm, w.indexer_k_norm_bias, ctx_.weights.inv_freq(),
                             rope_attention_scaling_, positions, slots, n, dim, rope, ctx_.stream);
  }
}

void SparseSelector::select_stored(int64_t l, const GpuStep& step, const IndexKeyCache& key_cache) {
  const ModelConfig& c = ctx_.config;
  const CudaLayerWeights& w = ctx_.weights.layers()[static_cast<size_t>(l)];
  Workspace& ws = ctx_.ws;
  const ForwardShape& shape = step.shape;
  const StepMetadata& m = step.metadata;
  cudaStream_t stream = ctx_.stream;
  const int64_t T = shape.num_tokens, H = c.hidden_size;
  const int32_t index_heads = static_cast<int32_t>(c.index_n_heads), index_dim = static_cast<int32_t>(c.index_head_dim);
  const int32_t rope = static_cast<int32_t>(c.qk_rope_head_dim), topk = static_cast<int32_t>(c.index_topk);
  const int32_t max_len = ctx_.limits.max_model_len;
  ctx_.linear.gemm(ws.index_q, GemmOutputType::kBF16, ws.q_lora, w.indexer_wq_b, nullptr, T,
                   static_cast<int64_t>(index_heads) * index_dim, c.q_lora_rank, stream);
  kc::dsa_rope_index_queries(ws.index_q, ctx_.weights.inv_freq(), rope_attention_scaling_, m.positions, T, index_heads,
                             index_dim, rope, stream);
  ctx_.linear.gemm(ws.index_weights, GemmOutputType::kF32, ws.normed, w.indexer_weights_proj, nullptr, T, index_heads,
                   H, stream);
  const kc::PagedIndexKeyView keys{.cache = key_cache.keys,
                                   .block_tables = m.block_tables,
                                   .block_table_stride = ctx_.limits.block_table_stride,
                                   .block_size = ctx_.limits.kv_block_rows(),
                                   .head_dim = index_dim,
                                   .codes = key_cache.codes,
                                   .scales = key_cache.scales};
  const kernels::DcpLayout& dcp = ctx_.limits.dcp;
  const kc::DsaIndexerParams params{.num_heads = index_heads,
                                    .head_dim = index_dim,
                                    .topk = topk,
                                    .scale = score_scale_,
                                    .weight_scale = weight_scale_,
                                    .dcp = dcp};
  kc::dsa_index_scores(ws.index_scores, max_len, ws.index_q, ws.index_weights, keys, m.query_starts, m.context_lens,
                       shape.num_seqs, static_cast<int32_t>(T), shape.max_context_len, params, stream);
  kc::dsa_select_topk(ws.kept, ws.index_scores, max_len, m.query_starts, m.context_lens, shape.num_seqs,
                      static_cast<int32_t>(T), shape.max_context_len, topk, ws.topk_scratch, ws.topk_scratch_bytes,
                      stream, dcp);
  if (dcp.size == 1) return;
  // Under DCP the cut above is this rank's local top-k (local indices, the unsplit kernel's order
  // over its own keys); as (score, global position) candidates, ONE all-gather over the group and
  // the same merge on every rank give every rank the unsplit indexer's kept positions
  // (model/dcp_topk.h says why that is exact).
  auto* candidates = static_cast<kc::DcpCandidate*>(ws.dcp_candidates);
  auto* gathered = static_cast<kc::DcpCandidate*>(ws.dcp_gathered_candidates);
  kc::dcp_topk_candidates(candidates, ws.kept, ws.index_scores, max_len, static_cast<int32_t>(T), topk, dcp, stream);
  ctx_.dcp_comm->all_gather(candidates, gathered, static_cast<size_t>(T) * topk * sizeof(kc::DcpCandidate), stream);
  kc::dcp_merge_topk(ws.kept, gathered, dcp.size, static_cast<int32_t>(T), topk, stream);
}

}  // namespace tachyon::model::gpu
