// DenseMlpBlock: the gated MLP on the GPU, down(silu(gate) * up) with gate and up fused into one
// product; the layers of a dense model and the first_k_dense layers of DeepSeek-style models. At
// decode sizes, where our GEMV serves gate_up, SwiGLU is that product's epilogue
// (LinearDispatch::linear_silu); TACHYON_SWIGLU_FUSION=0 runs silu_and_mul on its own.
#pragma once

#include "tachyon/model/gpu/gpu_block.h"

namespace tachyon::model::gpu {

class DenseMlpBlock : public GpuBlock {
 public:
  explicit DenseMlpBlock(BlockContext& context);
  void plan_workspace(WorkspacePlan& plan) override;
  void add_gemm_problems(int64_t m, std::vector<kernels::cuda::GemmProblem>& problems) const override;
  std::vector<RoleInfo> roles() const override;
  void run_role(LinearRole role, int64_t layer, int64_t m) override;
  void forward(int64_t layer, const GpuStep& step) override;
  std::optional<NormedProduct> normed_product(int64_t layer) const override;

 private:
  LinearShape gate_up_shape() const { return {2 * ctx_.config.intermediate_size, ctx_.config.hidden_size}; }
  LinearShape down_shape() const { return {ctx_.config.hidden_size, ctx_.config.intermediate_size}; }
  void run_down(int64_t layer, int64_t m);  // Workspace::act -> Workspace::proj

  bool fuse_swiglu_ = true;
};

}  // namespace tachyon::model::gpu
