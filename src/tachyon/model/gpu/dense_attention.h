// DenseAttentionBlock: a q/k/v model's attention on the GPU (Llama, Mistral, Qwen2/3, their MoE
// variants): the fused qkv product, Qwen3's q/k norms + RoPE + the K/V store in one kernel, the
// split-KV decode kernel for the leading one-token sequences and the prefill kernel for the
// rest, then o_proj. Caches K and V per token (kv_size bf16 each).
#pragma once

#include "tachyon/model/gpu/gpu_block.h"

namespace tachyon::model::gpu {

class DenseAttentionBlock : public GpuBlock {
 public:
  explicit DenseAttentionBlock(BlockContext& context);
  void plan_workspace(WorkspacePlan& plan) override;
  void add_gemm_problems(int64_t m, std::vector<kernels::cuda::GemmProblem>& problems) const override;
  std::vector<RoleInfo> roles() const override;
  void run_role(LinearRole role, int64_t layer, int64_t m) override;
  std::vector<KvRegion> kv_regions() const override;
  void forward(int64_t layer, const GpuStep& step) override;
  std::optional<NormedProduct> normed_product(int64_t layer) const override;

 private:
  LinearShape qkv_shape() const;
  LinearShape o_shape() const;
};

}  // namespace tachyon::model::gpu
