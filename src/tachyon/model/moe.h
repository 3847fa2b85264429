// The mixture-of-experts MLP of Qwen3-MoE on the CPU reference: a router picks k of the layer's
// experts for each token, and the token's output is the weighted sum of those experts' SwiGLU
// MLPs. It replaces the dense MLP in the layers ModelConfig::is_moe_layer names; the rest of the
// decoder is the dense forward's (dense_model.cpp).
//
// The routing, as transformers 5's Qwen3MoeTopKRouter computes it, in f32:
//   router_logits = x @ router^T                     [num_experts]
//   probs         = softmax(router_logits)
//   top-k         = the k largest probs; equal probs: the lower expert index first
//   weights       = the k probs, divided by their sum when norm_topk_prob
// torch.topk documents no order among equal values; exact ties of f32 softmax probabilities do
// not occur with trained or random router weights (only with e.g. an all-zero router), so no
// golden can tell the difference, and ours is at least deterministic.
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

// out: [hidden] = down_e(silu(gate_e(x)) * up_e(x)) for expert e of layer weights `w`; x: [hidden].
void expert_mlp(const ModelConfig& config, const LayerWeights& w, int64_t expert, const float* x, float* out);

// x: [n, hidden], the post-attention-normed hidden states of a MoE layer. Returns [n, hidden]:
// for each token the sum over its k experts of weight * expert_mlp. router_logits, when given,
// receives the router's logits [n, num_experts] (before the softmax).
std::vector<float> moe_mlp(const ModelConfig& config, const LayerWeights& w, std::span<const float> x, int64_t n,
                           std::vector<float>* router_logits = nullptr);

}  // namespace tachyon::model
