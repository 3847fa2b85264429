// SparseSelector: DeepSeek-V3.2's lightning indexer on the GPU (model/dsa_indexer.h), the part of
// latent attention that picks which cached tokens each new token attends. Index queries from the
// q LoRA, one index key per token (LayerNorm + rope) into its own KV region, per-head weights,
// then the scores of every cached token and each new token's top-k into Workspace::kept, all on
// the GPU (no host round trip, graph-capturable). GLM-5's "shared" layers have no indexer and
// reuse the last full layer's selection. Under decode context parallelism each rank scores its own
// keys, keeps its local top-k, and one all-gather of (score, global position) candidates and their
// merge give every rank the unsplit selection.
#pragma once

#include "tachyon/model/gpu/gpu_block.h"

namespace tachyon::model::gpu {

// One layer's index-key cache: bf16 keys, or (--kv-cache-dtype fp8) E4M3 codes with one f32
// factor per key, as the CPU reference's FP8 cache rounds them.
struct IndexKeyCache {
  bf16* keys = nullptr;      // [slots, index_head_dim] bf16
  uint8_t* codes = nullptr;  // FP8: [slots, index_head_dim] E4M3
  float* scales = nullptr;   // FP8: [slots] f32
};

class SparseSelector {
 public:
  SparseSelector(BlockContext& context, float rope_attention_scaling);
  void plan_workspace(WorkspacePlan& plan);
  void add_gemm_problems(int64_t m, std::vector<kernels::cuda::GemmProblem>& problems) const;
  // The key cache's planes per token (KvRegion order: the codes before their 4-byte factors, so
  // appended after 16-byte planes every plane of a layer starts 16-byte aligned).
  std::vector<KvRegion> kv_regions() const;
  // Writes this step's index keys into `key_cache` and each token's kept positions into
  // Workspace::kept. Reads Workspace::normed and Workspace::q_lora.
  void select(int64_t layer, const GpuStep& step, const IndexKeyCache& key_cache);
  // The parts of select(), for prefill context parallelism, where every rank stores the whole
  // step's keys from the group's gathered projections:
  // Workspace::index_k = wk(Workspace::normed) for the step's m rows;
  void project_keys(int64_t layer, int64_t m);
  // n keys k_raw [n, D_I] (wk outputs) normed, roped at `positions` and stored at `slots`;
  void store_keys(int64_t layer, const bf16* k_raw, const int32_t* positions, const int32_t* slots, int64_t n,
                  const IndexKeyCache& key_cache);
  // the step's rows' top-k over the keys already in the cache, into Workspace::kept.
  void select_stored(int64_t layer, const GpuStep& step, const IndexKeyCache& key_cache);

 private:
  BlockContext& ctx_;
  float rope_attention_scaling_;
  // As the CPU reference: index_head_dim^-0.5 inside the relu, index_n_heads^-0.5 on the weights.
  float score_scale_;
  float weight_scale_;
};

}  // namespace tachyon::model::gpu
