// DeepSeek's latent attention (MLA) and DeepSeek-V3.2's sparse attention (DSA) in the CUDA
// runner: the absorbed form of model/mla_absorbed.h on the GPU. Per layer, for T new tokens:
//   q      = q_b_proj(rms_norm(q_a_proj(x)))  (or q_proj(x))             [T, heads, nope + rope]
//   kv_a   = kv_a_proj_with_mqa(x)                                       [T, rank + rope]
//   cache <- [rms_norm(kv_a[:rank]) | rope(kv_a[rank:])]                 one row per token (mla_rope.h)
//   q_abs  = [q_nope_h @ W_uk_h | rope(q_pe_h)]                          per-head GEMM + rope
//   DSA:     kept = the indexer's top-k per token (dsa_indexer.h); GLM-5's shared layers reuse
//            the last full layer's, and its interleaved indexer rope runs as rotate-half over
//            reordered weight rows (cuda_weights.cpp, model/dsa_indexer.h)
//   lat    = attention over the cached latents (all earlier tokens, or the kept ones)  [T, heads, rank]
//   out    = o_proj(lat_h @ W_uv_h^T)                                    [T, hidden]
// Each step reads the cache's rows once per (sequence, KV split) for all heads; nothing is
// decompressed. Tested against the f32 reference by tests/gpu/test_cuda_model_runner.cpp.
#include "tachyon/kernels/cuda/dsa_indexer.h"
#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/cuda/mla_rope.h"
#include "tachyon/kernels/cuda/rms_norm.h"
#include "tachyon/model/mla.h"
#include "tachyon/runner/cuda/cuda_runner_workspace.h"

namespace tachyon::runner {

namespace kc = kernels::cuda;

void CudaModelRunner::mla_attention(const CudaLayerWeights& w, int64_t l, const ForwardShape& shape,
                                    const StepMetadata& m) {
  const model::ModelConfig& c = weights_.config();
  const int64_t T = shape.num_tokens, heads = c.num_attention_heads;
  const int64_t nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim, rank = c.kv_lora_rank, v = c.v_head_dim;
  const int64_t qk = nope + rope, qa = rank + rope, kv_b_rows = nope + v;
  const float eps = model::kMlaLatentNormEps;  // q_a_layernorm's and kv_a_layernorm's, not the config's

  run_role(Role::kMlaQA, l, T);  // into the q LoRA, or (no q LoRA) straight to the heads' queries
  if (w.q_a_proj != nullptr) {
    kc::rms_norm(ws_->q_lora, ws_->q_lora, w.q_a_norm, T, c.q_lora_rank, eps, stream_);
    run_role(Role::kMlaQB, l, T);
  }
  run_role(Role::kMlaKvA, l, T);
  bf16* latent_cache = cache_region(l, 0);
  kc::mla_store_latent(latent_cache, ws_->kv_a, w.kv_a_norm, eps, weights_.inv_freq(), rope_attention_scaling_,
                       c.rope_interleave, m.positions, m.slots, T, static_cast<int32_t>(rank),
                       static_cast<int32_t>(rope), stream_);
  // q_abs[t, h, :rank] = q[t, h, :nope] @ W_uk_h: W_uk_h is kv_b_proj's rows h * (nope + v) .. + nope.
  head_gemm_->run(ws_->q_absorbed, heads * qa, qa, {ws_->q_full, heads * qk, qk},
                  {w.kv_b_proj, rank, kv_b_rows * rank}, kc::HeadGemmB::kNone, T, rank, nope, heads, stream_);
  kc::mla_rope_queries(ws_->q_absorbed, ws_->q_full, weights_.inv_freq(), rope_attention_scaling_, c.rope_interleave,
                       m.positions, T, static_cast<int32_t>(heads), static_cast<int32_t>(nope),
                       static_cast<int32_t>(rank), static_cast<int32_t>(rope), stream_);

  const kc::PagedLatentView cache{.cache = latent_cache,
                                  .block_tables = m.block_tables,
                                  .block_table_stride = layout_.block_table_stride,
                                  .block_size = config_.block_size,
                                  .kv_lora_rank = static_cast<int32_t>(rank),
                                  .rope_dim = static_cast<int32_t>(rope)};
  const kc::MlaAttentionParams params{.num_heads = static_cast<int32_t>(heads), .scale = mla_softmax_scale_};
  if (c.has_sparse_attention()) {
    // GLM-5's "shared" layers attend the kept positions the last full layer left in ws_->kept.
    if (c.has_indexer(l)) dsa_select(w, l, shape, m);
    kc::sparse_mla_attention(ws_->attn_latent, ws_->q_absorbed, cache, ws_->kept, static_cast<int32_t>(c.index_topk),
                             m.query_starts, shape.num_seqs, static_cast<int32_t>(T), params, ws_->mla_split_scratch,
                             ws_->mla_split_scratch_bytes, stream_);
  } else {
    // Decodes first (row s is sequence s), then the prefill kernel over views from the first prefill.
    const int32_t decodes = shape.num_decode_seqs;
    if (decodes > 0) {
      kc::mla_decode_attention(ws_->attn_latent, ws_->q_absorbed, cache, m.context_lens, decodes,
                               shape.max_context_len, params, ws_->mla_split_scratch,
                               ws_->mla_split_scratch_bytes, stream_);
    }
    if (decodes < shape.num_seqs) {
      kc::PagedLatentView prefill_cache = cache;
      prefill_cache.block_tables = m.block_tables + static_cast<size_t>(decodes) * layout_.block_table_stride;
      kc::mla_prefill_attention(ws_->attn_latent, ws_->q_absorbed, prefill_cache, m.query_starts + decodes,
                                m.context_lens + decodes, shape.num_seqs - decodes, static_cast<int32_t>(T),
                                shape.max_query_len, params, stream_);
    }
  }
  // attn[t, h, :v] = lat[t, h] @ W_uv_h^T: W_uv_h is kv_b_proj's rows h * (nope + v) + nope .. + v.
  head_gemm_->run(ws_->attn, heads * v, v, {ws_->attn_latent, heads * rank, rank},
                  {w.kv_b_proj + nope * rank, rank, kv_b_rows * rank}, kc::HeadGemmB::kTransposed, T, v, rank, heads,
                  stream_);
  run_role(Role::kMlaO, l, T);
}

// The lightning indexer (model/dsa_indexer.h): index queries from the q LoRA, one index key per
// token (LayerNorm + rope) into the cache, per-head weights, then the scores of every cached
// token and each new token's top-k, all on the GPU (no host round trip, graph-capturable).
void CudaModelRunner::dsa_select(const CudaLayerWeights& w, int64_t l, const ForwardShape& shape,
                                 const StepMetadata& m) {
  const model::ModelConfig& c = weights_.config();
  const int64_t T = shape.num_tokens, H = c.hidden_size;
  const int32_t index_heads = static_cast<int32_t>(c.index_n_heads), index_dim = static_cast<int32_t>(c.index_head_dim);
  const int32_t rope = static_cast<int32_t>(c.qk_rope_head_dim), topk = static_cast<int32_t>(c.index_topk);
  const int32_t max_len = static_cast<int32_t>(config_.scheduler.max_model_len);
  gemm_.linear(ws_->index_q, kc::GemmOutputType::kBF16, ws_->q_lora, w.indexer_wq_b, nullptr, T,
               static_cast<int64_t>(index_heads) * index_dim, c.q_lora_rank, stream_);
  kc::dsa_rope_index_queries(ws_->index_q, weights_.inv_freq(), rope_attention_scaling_, m.positions, T, index_heads,
                             index_dim, rope, stream_);
  gemm_.linear(ws_->index_k, kc::GemmOutputType::kBF16, ws_->normed, w.indexer_wk, nullptr, T, index_dim, H, stream_);
  bf16* key_cache = cache_region(l, 1);
  kc::dsa_store_index_keys(key_cache, ws_->index_k, w.indexer_k_norm, w.indexer_k_norm_bias, weights_.inv_freq(),
                           rope_attention_scaling_, m.positions, m.slots, T, index_dim, rope, stream_);
  gemm_.linear(ws_->index_weights, kc::GemmOutputType::kF32, ws_->normed, w.indexer_weights_proj, nullptr, T,
               index_heads, H, stream_);
  const kc::PagedIndexKeyView keys{.cache = key_cache,
                                   .block_tables = m.block_tables,
                                   .block_table_stride = layout_.block_table_stride,
                                   .block_size = config_.block_size,
                                   .head_dim = index_dim};
  const kc::DsaIndexerParams params{.num_heads = index_heads,
                                    .head_dim = index_dim,
                                    .topk = topk,
                                    .scale = dsa_score_scale_,
                                    .weight_scale = dsa_weight_scale_};
  kc::dsa_index_scores(ws_->index_scores, max_len, ws_->index_q, ws_->index_weights, keys, m.query_starts,
                       m.context_lens, shape.num_seqs, static_cast<int32_t>(T), shape.max_context_len, params, stream_);
  kc::dsa_select_topk(ws_->kept, ws_->index_scores, max_len, m.query_starts, m.context_lens, shape.num_seqs,
                      static_cast<int32_t>(T), shape.max_context_len, topk, ws_->topk_scratch, ws_->topk_scratch_bytes,
                      stream_);
}

}  // namespace tachyon::runner
