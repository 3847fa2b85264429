// GpuBlock: one kind of layer part of the GPU decoder (dense attention, latent attention with
// its optional sparse selector, dense MLP, MoE MLP), one file each. A block reads its layer's
// input from Workspace::normed and leaves its output in Workspace::proj; it owns its weights
// (views of the uploaded model), its own workspace buffers for the planned limits, the GEMM
// problems it issues (which feed cuBLASLt tuning), its roles (which feed the GEMV choice) and,
// for attention blocks, the KV regions it caches. Why a block cannot serve a config is said by
// model/gpu_support.h, which the CPU build can call too.
#pragma once

#include <cuda_runtime.h>

#include <optional>
#include <span>
#include <vector>

#include "tachyon/kernels/cuda/gemm.h"
#include "tachyon/kernels/cuda/moe.h"
#include "tachyon/model/gpu/gpu_step.h"
#include "tachyon/model/gpu/gpu_weights.h"
#include "tachyon/model/gpu/gpu_workspace.h"
#include "tachyon/model/gpu/linear_dispatch.h"
#include "tachyon/model/gpu/side_stream.h"
#include "tachyon/model/layer_plan.h"
#include "tachyon/model/model_config.h"

namespace tachyon::dist {
class Communicator;
}

namespace tachyon::model::gpu {

// What every block works with, fixed at start-up. References outlive the blocks (the decoder
// owns them); kv is set once the runner has allocated the cache.
struct BlockContext {
  const ModelConfig& config;
  const CudaDenseWeights& weights;
  Workspace& ws;
  LinearDispatch& linear;
  GpuLimits limits;
  const KvCache* kv = nullptr;
  cudaStream_t stream = nullptr;
  // Row-parallel products (o_proj, down) add their bias: false on tensor-parallel ranks > 0, so
  // the all-reduce that follows sums it once.
  bool row_parallel_bias = true;
  std::span<const LayerKinds> layers;  // [num_hidden_layers] layer_plan(config): each layer's block kinds
  SideStream* side = nullptr;          // for run_branches; null: branches run one after the other
  dist::Communicator* dcp_comm = nullptr;  // the decode-context-parallel group when limits.dcp.size > 1
  dist::Communicator* pcp_comm = nullptr;  // the prefill-context-parallel group when limits.pcp_size > 1
  // Expert parallelism (TpSeam): the routed experts the MoE block's weights hold (count 0: all
  // num_experts), and whether this rank adds the shared expert.
  kernels::cuda::MoeExpertWindow experts = {};
  bool adds_shared_expert = true;
  // Data-parallel attention: the group whose ranks' tokens every MoE layer serves together
  // (GpuStep::expert_rows); null otherwise.
  dist::Communicator* ep_comm = nullptr;
};

// The product a block's forward() applies first to Workspace::normed, and nothing else reads
// normed: the norm before the block may then write that product's E4M3 input rows itself
// (LinearDispatch::fp8_input; GpuDecoder asks).
struct NormedProduct {
  LinearRole role = LinearRole::kQkv;
  LinearShape shape;
  LinearWeight weight;
  const bf16* bias = nullptr;
  bf16* out = nullptr;
};

class GpuBlock {
 public:
  explicit GpuBlock(BlockContext& context) : ctx_(context) {}
  virtual ~GpuBlock() = default;
  GpuBlock(const GpuBlock&) = delete;
  GpuBlock& operator=(const GpuBlock&) = delete;

  // Adds the block's own buffers, sized for ctx_.limits.
  virtual void plan_workspace(WorkspacePlan& plan) = 0;
  // The GEMM problems of m rows this block issues.
  virtual void add_gemm_problems(int64_t m, std::vector<kernels::cuda::GemmProblem>& problems) const = 0;
  // The roles it runs (valid after the workspace is assigned) and one of them for m rows of
  // `layer` on its buffers, for timing.
  virtual std::vector<RoleInfo> roles() const = 0;
  virtual void run_role(LinearRole role, int64_t layer, int64_t m) = 0;
  // The K/V regions it caches per token (attention blocks); none by default.
  virtual std::vector<KvRegion> kv_regions() const { return {}; }
  // Layer `layer` for the step: Workspace::normed -> Workspace::proj.
  virtual void forward(int64_t layer, const GpuStep& step) = 0;
  // Layers whose prefill sequences attended in latent attention's expanded form (latent_attention.h),
  // for tests; 0 for every other block.
  virtual int64_t expanded_prefill_layers() const { return 0; }
  // The block's NormedProduct for `layer`, where it has one; none by default.
  virtual std::optional<NormedProduct> normed_product(int64_t /*layer*/) const { return std::nullopt; }
  // The E4M3 rows the norm before this block writes for m rows of `layer` (empty: none).
  kernels::cuda::Fp8Rows normed_fp8_rows(int64_t layer, int64_t m) const {
    const std::optional<NormedProduct> p = normed_product(layer);
    return p ? ctx_.linear.fp8_input(p->role, p->shape, p->weight, p->bias, m) : kernels::cuda::Fp8Rows{};
  }

 protected:
  const CudaLayerWeights& layer_weights(int64_t layer) const {
    return ctx_.weights.layers()[static_cast<size_t>(layer)];
  }
  // forward()'s product `p` (normed_product) of m rows: of the E4M3 rows the norm wrote where
  // normed_fp8_rows answered, else of normed's bf16 rows.
  void run_normed_product(const NormedProduct& p, int64_t m) {
    if (const kernels::cuda::Fp8Rows rows = ctx_.linear.fp8_input(p.role, p.shape, p.weight, p.bias, m);
        !rows.empty()) {
      ctx_.linear.linear_quantized(p.shape, p.out, p.weight, p.bias, m, rows, ctx_.stream);
    } else {
      ctx_.linear.linear(p.role, p.shape, p.out, GemmOutputType::kBF16, ctx_.ws.normed, p.weight, p.bias, m,
                         ctx_.stream);
    }
  }
  // Two independent parts of a layer, each a callable issuing its kernels on the stream it is
  // given: with `concurrent` (and a side stream) `side` runs on the side stream while `main` runs
  // on the block's stream; otherwise `main`, then `side`, on the block's stream. Either way what
  // the block issues next sees both. `side` may issue only kernels that keep no state across
  // streams: our own kernels, and products for which LinearDispatch::stream_local holds (the
  // runner's cuBLASLt workspace and FP8 staging serve one stream at a time).
  template <typename Side, typename Main>
  void run_branches(bool concurrent, Side&& side, Main&& main) {
    if (!concurrent || ctx_.side == nullptr) {
      main(ctx_.stream);
      side(ctx_.stream);
      return;
    }
    ctx_.side->fork(ctx_.stream);
    side(ctx_.side->stream());
    main(ctx_.stream);
    ctx_.side->join(ctx_.stream);
  }
  BlockContext& ctx_;
};

}  // namespace tachyon::model::gpu
