// MoeMlpBlock: a mixture-of-experts layer's MLP on the GPU (kernels/cuda/moe.h): route (Qwen3-MoE's
// softmax top-k or DeepSeek-V3's group-limited sigmoid), group the (token, expert) pairs by expert,
// the two grouped products around SiLU (a grouped GEMV that streams each active expert's weights
// once for decode-sized steps of up to 8 tokens, tensor-core tiles above), then the weighted sum
// into Workspace::proj with DeepSeek's shared expert added in the same pass. Sizes come from the
// token count alone, so the block is captured in decode graphs like the rest of the layer. The
// shared expert does not depend on the routing: where its products are stream-local it runs on the
// side stream while the routed experts run (run_branches). A decode-sized step (up to 8 tokens)
// routes in one launch (router product, top-k and align: moe_route_decode) and applies SiLU in the
// gate_up product's epilogue (moe_grouped_gemv_silu): three kernels on the routed chain instead of
// six (the measured effect is in kernels/cuda/moe.h at moe_route_decode).
// Expert parallelism (BlockContext::experts): the weights hold the window's experts whole; every
// rank routes every token alike (the router is replicated and its input is the same bits on every
// rank after the attention all-reduce), groups and computes only its window's pairs, and adds only
// those, the shared expert on one rank; the decoder's all-reduce after the MLP sums the ranks. No
// dispatch and no count exchange, so the block stays capturable in graphs. Each rank reads only
// its active experts' weights, whole (no expert is cut into slices narrower than the kernels'
// tiles), and the seam is tensor parallelism's: one all-reduce of [T, hidden] per MoE layer.
// Data-parallel attention (BlockContext::ep_comm, whole-model ranks that run different sequences):
// the ranks first all-gather their MLP inputs (every rank knows every rank's row count from the
// step, GpuStep::expert_rows, so no count is exchanged), each runs its window's pairs of all the
// rows, one bf16 all-reduce sums the group, and each keeps its own rows and adds its own shared
// expert. A rank without sequences takes part with zero rows (GpuDecoder::serve_experts). The
// step's shape then depends on the other ranks' rows: eager only. (The CPU ranks' all-to-all
// dispatch, model/expert_dispatch.h, moves fewer bytes; this keeps the GPU path to the
// collectives every backend has.)
#pragma once

#include "tachyon/model/gpu/gpu_block.h"
#include "tachyon/tensor/cuda/device_buffer.h"

namespace tachyon::model::gpu {

class MoeMlpBlock : public GpuBlock {
 public:
  explicit MoeMlpBlock(BlockContext& context);
  void plan_workspace(WorkspacePlan& plan) override;
  void add_gemm_problems(int64_t m, std::vector<kernels::cuda::GemmProblem>& problems) const override;
  std::vector<RoleInfo> roles() const override;
  void run_role(LinearRole role, int64_t layer, int64_t m) override;
  void forward(int64_t layer, const GpuStep& step) override;

 private:
  void run_role_on(LinearRole role, int64_t layer, int64_t m, cudaStream_t stream);
  // Route `tokens` rows of `input` ([tokens, hidden]) and run their experts: each (token, expert)
  // pair's output into expert_down, for moe_combine.
  void routed_experts(int64_t layer, const bf16* input, int64_t tokens, cudaStream_t stream);
  // Data-parallel attention (ctx_.ep_comm): every rank's rows gathered, this rank's experts run
  // over all of them, the group's sums reduced, this rank's rows (plus its shared expert) kept.
  void expert_group_forward(int64_t layer, const GpuStep& step);
  // Ranks of the expert group whose rows the routing buffers hold at once (1 without one).
  int64_t expert_group_size() const;
  int64_t shared_intermediate() const { return ctx_.config.moe_intermediate_size * ctx_.config.n_shared_experts; }
  // DeepSeek's shared expert, on the rank that adds it (all ranks without expert parallelism).
  bool runs_shared_expert() const { return shared_intermediate() > 0 && ctx_.adds_shared_expert; }
  // The experts this block's weights hold and groups pairs for: the expert-parallel window's, or all.
  int32_t grouped_experts() const {
    return ctx_.experts.count > 0 ? ctx_.experts.count : static_cast<int32_t>(ctx_.config.num_experts);
  }
  LinearShape router_shape() const { return {ctx_.config.num_experts, ctx_.config.hidden_size}; }
  LinearShape shared_gate_up_shape() const { return {2 * shared_intermediate(), ctx_.config.hidden_size}; }
  LinearShape shared_down_shape() const { return {ctx_.config.hidden_size, shared_intermediate()}; }

  cuda::DeviceBuffer route_arrivals_;  // moe_route_decode's CTA counter (one unsigned int, 0 between launches)
  bool unit_weights_set_ = false;      // Workspace::unit_weights written (once, after the plan is assigned)
};

}  // namespace tachyon::model::gpu
