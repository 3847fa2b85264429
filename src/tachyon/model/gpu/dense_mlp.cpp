#include "tachyon/model/gpu/dense_mlp.h"

#include "tachyon/base/env_switch.h"
#include "tachyon/kernels/cuda/activation.h"

namespace tachyon::model::gpu {

namespace kc = kernels::cuda;

namespace {

// TACHYON_SWIGLU_FUSION=0 runs silu_and_mul as its own kernel after every gate_up product: to
// time the fused epilogue against its absence with one binary, and to rule it out.
bool swiglu_fusion_enabled() { return env_switch_on("TACHYON_SWIGLU_FUSION"); }

}  // namespace

DenseMlpBlock::DenseMlpBlock(BlockContext& context) : GpuBlock(context), fuse_swiglu_(swiglu_fusion_enabled()) {}

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
    run_down(layer, m);
  }
}

void DenseMlpBlock::run_down(int64_t layer, int64_t m) {
  const CudaLayerWeights& w = layer_weights(layer);
  ctx_.linear.linear(LinearRole::kDownWithSilu, down_shape(), ctx_.ws.proj, GemmOutputType::kBF16, ctx_.ws.act, w.down,
                     ctx_.row_parallel_bias ? w.down_bias : nullptr, m, ctx_.stream);
}

std::optional<NormedProduct> DenseMlpBlock::normed_product(int64_t layer) const {
  const CudaLayerWeights& w = layer_weights(layer);
  return NormedProduct{LinearRole::kGateUp, gate_up_shape(), w.gate_up, w.gate_up_bias, ctx_.ws.gate_up};
}

void DenseMlpBlock::forward(int64_t layer, const GpuStep& step) {
  const int64_t m = step.shape.num_tokens;
  const CudaLayerWeights& w = layer_weights(layer);
  // At decode sizes the gate_up GEMV writes the activations itself (its SwiGLU epilogue).
  if (fuse_swiglu_ && ctx_.linear.linear_silu(LinearRole::kGateUp, gate_up_shape(), ctx_.ws.act, ctx_.ws.normed,
                                              w.gate_up, w.gate_up_bias, m, ctx_.stream)) {
    run_down(layer, m);
    return;
  }
  run_normed_product(*normed_product(layer), m);
  // Where down runs as an E4M3 product, SwiGLU writes its E4M3 input rows (and no bf16 ones),
  // with factors per 128 columns or one per token, as the product takes them.
  const bf16* down_bias = ctx_.row_parallel_bias ? w.down_bias : nullptr;
  const kc::Fp8Rows down_rows = ctx_.linear.fp8_input(LinearRole::kDownWithSilu, down_shape(), w.down, down_bias, m);
  if (down_rows.empty()) {
    run_role(LinearRole::kDownWithSilu, layer, m);
    return;
  }
  kc::silu_and_mul(nullptr, ctx_.ws.gate_up, m, ctx_.config.intermediate_size, ctx_.stream, down_rows);
  ctx_.linear.linear_quantized(down_shape(), ctx_.ws.proj, w.down, down_bias, m, down_rows, ctx_.stream);
}

}  // namespace tachyon::model::gpu
