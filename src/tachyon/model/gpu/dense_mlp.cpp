#include "tachyon/model/gpu/dense_mlp.h"

#include "tachyon/kernels/cuda/activation.h"

namespace tachyon::model::gpu {

namespace kc = kernels::cuda;

void DenseMlpBlock::plan_workspace(WorkspacePlan& plan) {
  const size_t T = static_cast<size_t>(ctx_.limits.max_tokens), inter = static_cast<size_t>(ctx_.config.intermediate_size);
  plan.add(&ctx_.ws.gate_up, T * 2 * inter * 2);
  plan.add(&ctx_.ws.act, T * inter * 2);
}

void DenseMlpBlock::add_gemm_problems(int64_t m, std::vector<kc::GemmProblem>& problems) const {
  const bool bias = ctx_.config.mlp_bias;
  problems.push_back({m, gate_up_shape().n, gate_up_shape().k, kc::GemmOutputType::kBF16, bias});
  problems.push_back({m, down_shape().n, down_shape().k, kc::GemmOutputType::kBF16, bias});
}

std::vector<RoleInfo> DenseMlpBlock::roles() const {
  return {{LinearRole::kGateUp, gate_up_shape(), ctx_.ws.normed, gate_up_shape().k},
          {LinearRole::kDownWithSilu, down_shape(), ctx_.ws.gate_up, gate_up_shape().n}};
}

void DenseMlpBlock::run_role(LinearRole role, int64_t layer, int64_t m) {
  const CudaLayerWeights& w = layer_weights(layer);
  Workspace& ws = ctx_.ws;
  if (role == LinearRole::kGateUp) {
    ctx_.linear.linear(role, gate_up_shape(), ws.gate_up, GemmOutputType::kBF16, ws.normed, w.gate_up, w.gate_up_bias,
                       m, ctx_.stream);
  } else if (role == LinearRole::kDownWithSilu) {
    kc::silu_and_mul(ws.act, ws.gate_up, m, ctx_.config.intermediate_size, ctx_.stream);
    ctx_.linear.linear(role, down_shape(), ws.proj, GemmOutputType::kBF16, ws.act, w.down,
                       ctx_.row_parallel_bias ? w.down_bias : nullptr, m, ctx_.stream);
  }
}

void DenseMlpBlock::forward(int64_t layer, const GpuStep& step) {
  run_role(LinearRole::kGateUp, layer, step.shape.num_tokens);
  run_role(LinearRole::kDownWithSilu, layer, step.shape.num_tokens);
}

}  // namespace tachyon::model::gpu
