// The mixture-of-experts MLP of Qwen3-MoE and DeepSeek-V3 on the CPU reference: a router picks k
// of the layer's experts for each token, and the token's output is the weighted sum of those
// experts' SwiGLU MLPs (plus, for DeepSeek, a shared expert every token runs). It replaces the
// dense MLP in the layers ModelConfig::is_moe_layer names; the rest of the decoder is the dense
// forward's (dense_model.cpp). ModelConfig::router says which routing runs.
//
// kSoftmaxTopK, as transformers 5's Qwen3MoeTopKRouter computes it, in f32:
//   router_logits = x @ router^T                     [num_experts]
//   probs         = softmax(router_logits)
//   top-k         = the k largest probs; equal probs: the lower expert index first
//   weights       = the k probs, divided by their sum when norm_topk_prob
// torch.topk documents no order among equal values; exact ties of f32 softmax probabilities do
// not occur with trained or random router weights (only with e.g. an all-zero router), so no
// golden can tell the difference, and ours is at least deterministic.
//
// kSigmoidGroupLimited, as transformers 5's DeepseekV3MoE.route_tokens_to_experts, in f32:
//   scores        = sigmoid(router_logits)                     [num_experts]
//   choice        = scores + e_score_correction_bias           (the bias steers the choice only)
//   group score   = sum of the 2 largest choice values in each of n_group equal groups
//   kept groups   = the topk_group best groups; the other groups' choice values become 0.0
//                   (0.0, not -inf, as transformers and DeepSeek's own code mask)
//   top-k         = the k largest masked choice values
//   weights       = the k ORIGINAL scores, / (their sum + 1e-20) when norm_topk_prob,
//                   then * routed_scaling_factor
//   out           = sum over the k experts (in expert order) + shared_experts(x)
// The non-obvious decision: one plain loop per token over its k experts, each a 1-row product.
// That is slow for real shapes and meant to be: the CPU path is the spec a GPU grouped GEMM over
// the stacked expert arrays (model_weights.h) will be checked against.
// Tests: tests/unit/test_moe.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/model/model_config.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model {

// One routed expert of one token.
struct ExpertChoice {
  int64_t expert = 0;   // index in [0, num_experts)
  float weight = 0.0f;  // its routing weight (the softmax probability, renormalized or not)
};

// router_logits: [num_experts] of one token -> its top_k experts, highest probability first.
std::vector<ExpertChoice> route_token(std::span<const float> router_logits, int64_t top_k, bool norm_topk_prob);

// DeepSeek-V3's routing settings (ModelConfig's fields of the same names).
struct GroupLimitedRouting {
  int64_t top_k = 1;
  int64_t n_group = 1;
  int64_t topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};
GroupLimitedRouting group_limited_routing(const ModelConfig& config);

// router_logits, score_bias: [num_experts] of one token -> its top_k experts, highest choice value
// first, each with its final weight (see above). Among equal choice values the lower index wins.
std::vector<ExpertChoice> route_token_group_limited(std::span<const float> router_logits,
                                                   std::span<const float> score_bias, const GroupLimitedRouting& r);

// out: [hidden] = down_e(silu(gate_e(x)) * up_e(x)) for the expert stacked at index `expert` of
// layer weights `w` (the layer's expert `expert` unless the rank holds a slice); x: [hidden].
void expert_mlp(const ModelConfig& config, const LayerWeights& w, int64_t expert, const float* x, float* out);

// x: [n, hidden], the post-attention-normed hidden states of a MoE layer. Returns [n, hidden]:
// for each token the sum over its k experts of weight * expert_mlp, plus the shared expert's
// output when the config has one. router_logits, when given, receives the router's logits
// [n, num_experts] (before the softmax or sigmoid).
std::vector<float> moe_mlp(const ModelConfig& config, const LayerWeights& w, std::span<const float> x, int64_t n,
                           std::vector<float>* router_logits = nullptr);

// The routed experts a rank holds: the layer's experts [begin, begin + count) are stacked in
// experts_gate_up / experts_down as local experts 0..count-1. Under expert parallelism
// (model/tp_moe.h) each rank holds a slice; otherwise count = num_experts.
struct ExpertRange {
  int64_t begin = 0;
  int64_t count = 0;
};

// moe_mlp's two halves, so that a rank of an expert-parallel group can combine the routed sums
// of every rank before the shared expert is added. moe_routed: [n, hidden], for each token the
// weighted sum (in expert order) over those of its k experts that lie in `held` (the routing
// itself sees all num_experts). add_shared_expert: out [n, hidden] += the shared expert of x.
std::vector<float> moe_routed(const ModelConfig& config, const LayerWeights& w, std::span<const float> x, int64_t n,
                              ExpertRange held, std::vector<float>* router_logits = nullptr);
void add_shared_expert(const ModelConfig& config, const LayerWeights& w, std::span<const float> x, int64_t n,
                       std::vector<float>& out);

}  // namespace tachyon::model
