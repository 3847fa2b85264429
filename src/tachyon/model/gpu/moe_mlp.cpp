#include "tachyon/model/gpu/moe_mlp.h"

#include <algorithm>

#include "tachyon/dist/communicator.h"
#include "tachyon/kernels/cuda/activation.h"
#include "tachyon/kernels/cuda/fp8.h"
#include "tachyon/kernels/cuda/moe.h"
#include "tachyon/model/gpu_support.h"

namespace tachyon::model::gpu {

namespace kc = kernels::cuda;

MoeMlpBlock::MoeMlpBlock(BlockContext& context) : GpuBlock(context), route_arrivals_(sizeof(unsigned int)) {
  const std::string reason = moe_mlp_gpu_unsupported(ctx_.config);
  TACHYON_CHECK(reason.empty()) << "the GPU MoE block cannot serve this model: " << reason;
  // On the block's stream, so it is ordered before every launch that reads the counter.
  TACHYON_CUDA_CHECK(cudaMemsetAsync(route_arrivals_.data(), 0, sizeof(unsigned int), ctx_.stream));
}

int64_t MoeMlpBlock::expert_group_size() const { return ctx_.ep_comm != nullptr ? ctx_.ep_comm->size() : 1; }

void MoeMlpBlock::plan_workspace(WorkspacePlan& plan) {
  const ModelConfig& c = ctx_.config;
  Workspace& ws = ctx_.ws;
  const size_t own = static_cast<size_t>(ctx_.limits.max_tokens), hidden = static_cast<size_t>(c.hidden_size);
  const size_t T = own * static_cast<size_t>(expert_group_size());  // rows the routing holds at once
  const size_t E = static_cast<size_t>(c.num_experts), k = static_cast<size_t>(c.num_experts_per_tok);
  const size_t pairs = T * k, moe_inter = static_cast<size_t>(c.moe_intermediate_size);
  const size_t capacity = static_cast<size_t>(kc::moe_sorted_capacity(static_cast<int64_t>(pairs), grouped_experts()));
  plan.add(&ws.router_logits, T * E * 4);
  plan.add(&ws.topk_ids, pairs * 4);
  plan.add(&ws.topk_weights, pairs * 4);
  plan.add(&ws.sorted_rows, capacity * 4);
  plan.add(&ws.block_expert, capacity / kc::kMoeBlockM * 4);
  plan.add(&ws.expert_gate_up, pairs * 2 * moe_inter * 2);
  plan.add(&ws.expert_act, pairs * moe_inter * 2);
  plan.add(&ws.expert_down, pairs * hidden * 2);
  if (ctx_.weights.fp8()) {
    const auto blocks = [](size_t width) { return (width + 127) / 128; };
    plan.add(&ws.expert_in_fp8, std::max(T * hidden, pairs * moe_inter));
    plan.add(&ws.expert_in_scale, std::max(T * blocks(hidden), pairs * blocks(moe_inter)) * sizeof(float));
  }
  const size_t shared_inter = static_cast<size_t>(shared_intermediate());
  plan.add(&ws.shared_gate_up, own * 2 * shared_inter * 2);
  plan.add(&ws.shared_act, own * shared_inter * 2);
  plan.add(&ws.shared_out, shared_inter > 0 ? own * hidden * 2 : 0);
  if (ctx_.ep_comm != nullptr) {
    plan.add(&ws.expert_group_rows, T * hidden * 2);
    plan.add(&ws.expert_group_sums, T * hidden * 2);
    plan.add(&ws.unit_weights, own * sizeof(float));
  }
}

void MoeMlpBlock::add_gemm_problems(int64_t m, std::vector<kc::GemmProblem>& problems) const {
  if (runs_shared_expert()) {
    problems.push_back({m, shared_gate_up_shape().n, shared_gate_up_shape().k, kc::GemmOutputType::kBF16, false});
    problems.push_back({m, shared_down_shape().n, shared_down_shape().k, kc::GemmOutputType::kBF16, false});
  }
  problems.push_back({m, router_shape().n, router_shape().k, kc::GemmOutputType::kF32, false});
}

std::vector<RoleInfo> MoeMlpBlock::roles() const {
  std::vector<RoleInfo> roles = {{LinearRole::kRouter, router_shape(), ctx_.ws.normed, router_shape().k}};
  if (runs_shared_expert()) {
    roles.push_back({LinearRole::kSharedGateUp, shared_gate_up_shape(), ctx_.ws.normed, shared_gate_up_shape().k});
    roles.push_back(
        {LinearRole::kSharedDownWithSilu, shared_down_shape(), ctx_.ws.shared_gate_up, shared_gate_up_shape().n});
  }
  return roles;
}

void MoeMlpBlock::run_role(LinearRole role, int64_t layer, int64_t m) { run_role_on(role, layer, m, ctx_.stream); }

void MoeMlpBlock::run_role_on(LinearRole role, int64_t layer, int64_t m, cudaStream_t stream) {
  const CudaLayerWeights& w = layer_weights(layer);
  Workspace& ws = ctx_.ws;
  switch (role) {
    case LinearRole::kRouter:
      ctx_.linear.linear(role, router_shape(), ws.router_logits, GemmOutputType::kF32, ws.normed, w.router, nullptr, m,
                         stream);
      break;
    case LinearRole::kSharedGateUp:
      ctx_.linear.linear(role, shared_gate_up_shape(), ws.shared_gate_up, GemmOutputType::kBF16, ws.normed,
                         w.shared_gate_up, nullptr, m, stream);
      break;
    case LinearRole::kSharedDownWithSilu:
      kc::silu_and_mul(ws.shared_act, ws.shared_gate_up, m, shared_intermediate(), stream);
      ctx_.linear.linear(role, shared_down_shape(), ws.shared_out, GemmOutputType::kBF16, ws.shared_act, w.shared_down,
                         nullptr, m, stream);
      break;
    default:
      break;
  }
}

namespace {

// The grouped GEMM over a layer's bf16 experts (a has a_rows rows), on wgmma.
void grouped_gemm(bf16* out, const bf16* a, int64_t a_rows, const LinearWeight& w, const int32_t* sorted_rows,
                  const int32_t* block_expert, int64_t capacity, int64_t a_row_divisor, int64_t n, int64_t k,
                  cudaStream_t stream) {
  kc::moe_grouped_gemm_wgmma(out, a, a_rows, w.values, sorted_rows, block_expert, capacity, a_row_divisor, n, k,
                             stream);
}

}  // namespace

void MoeMlpBlock::routed_experts(int64_t layer, const bf16* input, int64_t T, cudaStream_t stream) {
  const ModelConfig& c = ctx_.config;
  const CudaLayerWeights& w = layer_weights(layer);
  Workspace& ws = ctx_.ws;
  const int64_t H = c.hidden_size, I = c.moe_intermediate_size;
  const int32_t E = static_cast<int32_t>(c.num_experts), k = static_cast<int32_t>(c.num_experts_per_tok);
  const int64_t pairs = T * k, capacity = kc::moe_sorted_capacity(pairs, grouped_experts());
  // Up to 8 tokens (decode) no expert has more than T pairs: the grouped GEMV streams each active
  // expert's weights once at HBM bandwidth, where a 64-row tensor-core tile would be padding; the
  // routing before it is one launch, and SiLU is the gate_up product's epilogue.
  if (T <= kc::kMoeRouteDecodeMaxTokens) {
    kc::MoeRouting routing;
    routing.sigmoid_grouped = c.router == RouterKind::kSigmoidGroupLimited;
    routing.top_k = k;
    routing.renormalize = c.norm_topk_prob;
    routing.correction_bias = w.router_bias;
    routing.n_group = static_cast<int32_t>(c.n_group);
    routing.topk_group = static_cast<int32_t>(c.topk_group);
    routing.routed_scaling_factor = static_cast<float>(c.routed_scaling_factor);
    routing.window = ctx_.experts;
    const kc::MoeRouteOutputs routed{ws.router_logits, ws.topk_ids,    ws.topk_weights,
                                     ws.sorted_rows,   ws.block_expert, capacity};
    kc::moe_route_decode(routed, input, w.router, T, H, E, routing, route_arrivals_.as<unsigned int>(), stream);
    const int32_t max_pairs = static_cast<int32_t>(T);
    const LinearWeight& gate_up = w.experts_gate_up;
    const LinearWeight& down = w.experts_down;
    if (gate_up.fp8 != nullptr) {
      kc::moe_grouped_gemv_silu(ws.expert_act, input, gate_up.fp8, gate_up.scale, ws.sorted_rows, ws.block_expert,
                                capacity, k, I, H, max_pairs, stream);
    } else {
      kc::moe_grouped_gemv_silu(ws.expert_act, input, gate_up.values, ws.sorted_rows, ws.block_expert, capacity, k, I,
                                H, max_pairs, stream);
    }
    if (down.fp8 != nullptr) {
      kc::moe_grouped_gemv(ws.expert_down, ws.expert_act, down.fp8, down.scale, ws.sorted_rows, ws.block_expert,
                           capacity, 1, H, I, max_pairs, stream);
    } else {
      kc::moe_grouped_gemv(ws.expert_down, ws.expert_act, down.values, ws.sorted_rows, ws.block_expert, capacity, 1, H,
                           I, max_pairs, stream);
    }
    return;
  }
  ctx_.linear.linear(LinearRole::kRouter, router_shape(), ws.router_logits, GemmOutputType::kF32, input, w.router,
                     nullptr, T, stream);
  if (c.router == RouterKind::kSigmoidGroupLimited) {
    kc::moe_topk_sigmoid_grouped(ws.topk_ids, ws.topk_weights, ws.router_logits, w.router_bias, T, E, k,
                                 static_cast<int32_t>(c.n_group), static_cast<int32_t>(c.topk_group), c.norm_topk_prob,
                                 static_cast<float>(c.routed_scaling_factor), stream);
  } else {
    kc::moe_topk_softmax(ws.topk_ids, ws.topk_weights, ws.router_logits, T, E, k, c.norm_topk_prob, stream);
  }
  kc::moe_align(ws.sorted_rows, ws.block_expert, ws.topk_ids, pairs, E, capacity, stream, ctx_.experts);
  if (w.experts_gate_up.fp8 != nullptr) {
    // E4M3 experts: the inputs quantized per row and 128 columns, as the dense FP8 products of
    // more than 8 rows take them, and both products on the FP8 tensor cores.
    const LinearWeight& gate_up = w.experts_gate_up;
    const LinearWeight& down = w.experts_down;
    kc::fp8_quantize_rows(ws.expert_in_fp8, ws.expert_in_scale, input, T, T, H, stream);
    kc::moe_grouped_gemm_fp8(ws.expert_gate_up, ws.expert_in_fp8, ws.expert_in_scale, T, gate_up.fp8, gate_up.scale,
                             ws.sorted_rows, ws.block_expert, capacity, k, 2 * I, H, stream);
    if (I % 128 == 0 && ctx_.linear.fuses_fp8_quantize()) {  // SwiGLU writes down's E4M3 rows (fp8_rows.h)
      kc::silu_and_mul(nullptr, ws.expert_gate_up, pairs, I, stream,
                       kc::Fp8Rows{.values = ws.expert_in_fp8, .scale = ws.expert_in_scale, .padded_rows = pairs});
    } else {
      kc::silu_and_mul(ws.expert_act, ws.expert_gate_up, pairs, I, stream);
      kc::fp8_quantize_rows(ws.expert_in_fp8, ws.expert_in_scale, ws.expert_act, pairs, pairs, I, stream);
    }
    kc::moe_grouped_gemm_fp8(ws.expert_down, ws.expert_in_fp8, ws.expert_in_scale, pairs, down.fp8, down.scale,
                             ws.sorted_rows, ws.block_expert, capacity, 1, H, I, stream);
    return;
  }
  grouped_gemm(ws.expert_gate_up, input, T, w.experts_gate_up, ws.sorted_rows, ws.block_expert, capacity, k, 2 * I,
               H, stream);
  kc::silu_and_mul(ws.expert_act, ws.expert_gate_up, pairs, I, stream);
  grouped_gemm(ws.expert_down, ws.expert_act, pairs, w.experts_down, ws.sorted_rows, ws.block_expert, capacity, 1, H,
               I, stream);
}

void MoeMlpBlock::forward(int64_t layer, const GpuStep& step) {
  const ModelConfig& c = ctx_.config;
  const CudaLayerWeights& w = layer_weights(layer);
  Workspace& ws = ctx_.ws;
  const int64_t T = step.shape.num_tokens;
  if (!step.expert_rows.rank_rows.empty()) return expert_group_forward(layer, step);
  auto routed = [&](cudaStream_t stream) { routed_experts(layer, ws.normed, T, stream); };
  // DeepSeek's shared expert: a dense MLP every token runs, added in the combine's pass. It reads
  // only `normed` and writes only its own buffers, so it may overlap the routing.
  const bool shared = runs_shared_expert() && !w.shared_gate_up.empty();
  if (shared) {
    const bool concurrent =
        ctx_.linear.stream_local(LinearRole::kSharedGateUp, shared_gate_up_shape(), w.shared_gate_up, T) &&
        ctx_.linear.stream_local(LinearRole::kSharedDownWithSilu, shared_down_shape(), w.shared_down, T);
    run_branches(concurrent,
                 [&](cudaStream_t stream) {
                   run_role_on(LinearRole::kSharedGateUp, layer, T, stream);
                   run_role_on(LinearRole::kSharedDownWithSilu, layer, T, stream);
                 },
                 routed);
  } else {
    routed(ctx_.stream);
  }
  kc::moe_combine(ws.proj, ws.expert_down, ws.topk_weights, shared ? ws.shared_out : nullptr, T,
                  static_cast<int32_t>(c.num_experts_per_tok), c.hidden_size, ctx_.stream, ws.topk_ids, ctx_.experts);
}

void MoeMlpBlock::expert_group_forward(int64_t layer, const GpuStep& step) {
  const ModelConfig& c = ctx_.config;
  Workspace& ws = ctx_.ws;
  dist::Communicator& group = *ctx_.ep_comm;
  const std::span<const int32_t> rank_rows = step.expert_rows.rank_rows;
  const int me = group.rank();
  const int64_t T = step.shape.num_tokens, H = c.hidden_size;
  TACHYON_CHECK(static_cast<int>(rank_rows.size()) == group.size() && rank_rows[static_cast<size_t>(me)] == T)
      << "internal: the expert group's rows (" << rank_rows.size() << " ranks) do not hold this rank's " << T;
  const size_t row_bytes = static_cast<size_t>(H) * sizeof(bf16);
  std::vector<size_t> counts;
  int64_t total = 0, first = 0;
  for (size_t r = 0; r < rank_rows.size(); ++r) {
    TACHYON_CHECK(rank_rows[r] >= 0 && rank_rows[r] <= ctx_.limits.max_tokens)
        << "internal: rank " << r << " brings " << rank_rows[r] << " rows, more than a step holds";
    if (static_cast<int>(r) < me) first += rank_rows[r];
    total += rank_rows[r];
    counts.push_back(static_cast<size_t>(rank_rows[r]) * row_bytes);
  }
  if (!unit_weights_set_) {  // the copy-back's weights: 1.0 for each of this rank's rows
    const std::vector<float> ones(static_cast<size_t>(ctx_.limits.max_tokens), 1.0f);
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(ws.unit_weights, ones.data(), ones.size() * sizeof(float),
                                       cudaMemcpyHostToDevice, ctx_.stream));
    TACHYON_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));  // `ones` leaves scope
    unit_weights_set_ = true;
  }
  const dist::GatherItem rows{ws.normed, static_cast<size_t>(T) * row_bytes, ws.expert_group_rows, counts};
  group.all_gatherv(std::span<const dist::GatherItem>(&rows, 1), ctx_.stream);
  if (total == 0) return;
  routed_experts(layer, ws.expert_group_rows, total, ctx_.stream);
  kc::moe_combine(ws.expert_group_sums, ws.expert_down, ws.topk_weights, nullptr, total,
                  static_cast<int32_t>(c.num_experts_per_tok), H, ctx_.stream, ws.topk_ids, ctx_.experts);
  group.all_reduce(ws.expert_group_sums, ws.expert_group_sums, static_cast<size_t>(total * H), dist::ReduceType::kBF16,
                   ctx_.stream);
  if (T == 0) return;
  const bool shared = runs_shared_expert() && !layer_weights(layer).shared_gate_up.empty();
  if (shared) {
    run_role_on(LinearRole::kSharedGateUp, layer, T, ctx_.stream);
    run_role_on(LinearRole::kSharedDownWithSilu, layer, T, ctx_.stream);
  }
  // This rank's rows of the group's sums, plus its shared expert, into proj (a combine of one
  // pair per row at weight 1.0: the copy is exact, the shared expert added in f32, one rounding).
  kc::moe_combine(ws.proj, ws.expert_group_sums + first * H, ws.unit_weights, shared ? ws.shared_out : nullptr, T,
                  1, H, ctx_.stream);
}

}  // namespace tachyon::model::gpu
