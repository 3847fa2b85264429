// LatentAttentionBlock: DeepSeek's multi-head latent attention (MLA) on the GPU, in the absorbed
// form of model/mla_absorbed.h, with DeepSeek-V3.2's sparse selector when the model has one.
// Per layer, for T new tokens:
//   q      = q_b_proj(rms_norm(q_a_proj(x)))  (or q_proj(x))             [T, heads, nope + rope]
//   kv_a   = kv_a_proj_with_mqa(x)                                       [T, rank + rope]
//   cache <- [rms_norm(kv_a[:rank]) | rope(kv_a[rank:])]                 one row per token (mla_rope.h)
//   q_abs  = [q_nope_h @ W_uk_h | rope(q_pe_h)]                          per-head GEMM + rope
//   DSA:     kept = the selector's top-k per token (sparse_selector.h); GLM-5's shared layers
//            reuse the last full layer's, and its interleaved indexer rope runs as rotate-half
//            over reordered weight rows (gpu_weights.cpp, model/dsa_indexer.h)
//   lat    = attention over the cached latents (all earlier tokens, or the kept ones)  [T, heads, rank]
//   out    = o_proj(lat_h @ W_uv_h^T)                                    [T, hidden]
// Each step reads the cache's rows once per (sequence, KV split) for all heads; nothing is
// decompressed, except by a prefill in the expanded form (kernels/cuda/mla_expand.h): the prompt
// sequences' contexts decompressed into per-head keys and values, and the dense prefill kernel
// over them, where that scratch fits (expanded_rows_; dense attention on one GPU's whole cache,
// bf16 or FP8; TACHYON_MLA_EXPANDED_PREFILL=0 keeps the absorbed form). Caches one latent row per
// token, and one index key with the selector (with --kv-cache-dtype fp8 as E4M3 planes:
// kernels/cuda/mla_attention.h PagedLatentView). The latent
// path (kv_a and the cache store) does not depend on the query path: where kv_a's product is
// stream-local it runs on the side stream beside the queries (run_branches).
// Decode context parallelism (GpuLimits::dcp, kernels/dcp_layout.h): the rank caches only its
// tokens (latent rows and index keys at its own slots) and attends as the CPU ranks do
// (runner/dcp_attention_backend.h): the group's queries gathered, every head over the local rows
// with its log-sum-exp, ONE all_to_all_v sending each rank the partials of its heads, the LSE
// merge; the indexer's local top-k exchanged and merged (sparse_selector.h).
// Prefill context parallelism (GpuLimits::pcp_size, GpuStep::gathered): a rank projects only its
// rows of a split step; the layer's one grouped all_gatherv brings every rank's kv_a (and wk) rows,
// every rank stores the whole step in its cache, and its queries attend as usual.
#pragma once

#include <memory>

#include "tachyon/kernels/cuda/head_gemm.h"
#include "tachyon/kernels/cuda/mla_attention.h"
#include "tachyon/kernels/cuda/mla_expand.h"
#include "tachyon/model/gpu/gpu_block.h"
#include "tachyon/model/gpu/sparse_selector.h"

namespace tachyon::model::gpu {

class LatentAttentionBlock : public GpuBlock {
 public:
  explicit LatentAttentionBlock(BlockContext& context);
  void plan_workspace(WorkspacePlan& plan) override;
  void add_gemm_problems(int64_t m, std::vector<kernels::cuda::GemmProblem>& problems) const override;
  std::vector<RoleInfo> roles() const override;
  void run_role(LinearRole role, int64_t layer, int64_t m) override;
  std::vector<KvRegion> kv_regions() const override;
  void forward(int64_t layer, const GpuStep& step) override;
  int64_t expanded_prefill_layers() const override { return expanded_prefill_layers_; }

 private:
  void run_role_on(LinearRole role, int64_t layer, int64_t m, cudaStream_t stream);
  // Attention of `heads` query heads q [T, heads, qa] over `cache` into out [T, heads, rank]
  // (lse: each row's log-sum-exp, or null): the sparse kernel over Workspace::kept, or decode
  // then prefill kernels (the prefill one unless `prefill` is false).
  void attend(bf16* out, const bf16* q, int32_t heads, float* lse, const GpuStep& step,
              const kernels::cuda::PagedLatentView& cache, bool prefill = true);
  // Prefill sequences (those after the step's decodes) in the expanded form, into Workspace::attn's
  // rows of those sequences; expands() says whether a step runs it.
  void attend_expanded(int64_t layer, const GpuStep& step, const kernels::cuda::PagedLatentView& cache);
  bool expands(const ForwardShape& shape) const;
  // Decode context parallelism: the group's queries over this rank's rows, the partials of each
  // rank's heads sent to it, and the LSE merge of this rank's heads into Workspace::attn_latent.
  void attend_split(const GpuStep& step, const kernels::cuda::PagedLatentView& cache);
  bool split_cache() const { return ctx_.limits.dcp.size > 1; }
  // Prefill context parallelism: this rank's kv_a rows (and wk rows on a full indexer layer)
  // gathered over the group in one all_gatherv, and every row of the step stored (GpuStep::gathered).
  void gather_and_store(int64_t layer, const GpuStep& step, bool full_indexer);
  // Layer `layer`'s cache as the kernels take it: the latent rows (bf16, or the FP8 cache's codes,
  // factors and k_pe planes; kernels/cuda/mla_attention.h) and the selector's index keys.
  kernels::cuda::PagedLatentView latent_view(int64_t layer, const StepMetadata& m) const;
  IndexKeyCache index_key_cache(int64_t layer) const;
  // n rows of kv_a [n, rank + rope] normed, roped and stored at `slots` in layer `layer`'s cache.
  void store_latent(int64_t layer, const bf16* kv_a, const int32_t* positions, const int32_t* slots, int64_t n,
                    cudaStream_t stream);
  size_t latent_regions() const { return ctx_.limits.fp8_kv_cache ? 3 : 1; }  // before the selector's
  int64_t qk() const { return ctx_.config.qk_nope_head_dim + ctx_.config.qk_rope_head_dim; }
  int32_t expanded_head_dim() const {  // the expanded prefill's padded head width (mla_expand.h)
    return kernels::cuda::mla_expanded_head_dim(static_cast<int32_t>(ctx_.config.qk_nope_head_dim),
                                                static_cast<int32_t>(ctx_.config.qk_rope_head_dim),
                                                static_cast<int32_t>(ctx_.config.v_head_dim));
  }
  LinearShape q_a_shape() const;  // q_a_proj, or q_proj without a q LoRA
  LinearShape q_b_shape() const;  // n == 0 without a q LoRA
  LinearShape kv_a_shape() const;
  LinearShape o_shape() const;

  kernels::cuda::HeadGemm head_gemm_;          // the per-head absorbed products
  float rope_attention_scaling_ = 1.0f;        // cos/sin factor (YaRN's mscale)
  float softmax_scale_ = 1.0f;                 // qk_head_dim^-0.5 times YaRN's mscale^2
  int32_t expanded_rows_ = 0;                  // scratch rows of the expanded prefill; 0: never expanded
  int64_t expanded_prefill_layers_ = 0;
  std::unique_ptr<SparseSelector> selector_;   // DSA models only
};

}  // namespace tachyon::model::gpu
