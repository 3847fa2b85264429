// The routers (Qwen3-MoE's softmax top-k, DeepSeek-V3's group-limited sigmoid) and the experts
// on the CPU: plain loops, one token at a time (see moe.h).
#include "tachyon/model/moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tachyon/base/check.h"
#include "tachyon/kernels/linear.h"

namespace tachyon::model {

namespace cpu = kernels::cpu;

std::vector<ExpertChoice> route_token(std::span<const float> router_logits, int64_t top_k, bool norm_topk_prob) {
  const int64_t experts = static_cast<int64_t>(router_logits.size());
  TACHYON_CHECK(top_k >= 1 && top_k <= experts) << "top-k of " << top_k << " among " << experts << " experts";

  // Softmax in f32 with the max subtracted, as torch computes it.
  const float max_logit = *std::max_element(router_logits.begin(), router_logits.end());
  std::vector<float> probs(static_cast<size_t>(experts));  // [num_experts]
  float sum = 0.0f;
  for (int64_t e = 0; e < experts; ++e) {
    probs[static_cast<size_t>(e)] = std::exp(router_logits[static_cast<size_t>(e)] - max_logit);
    sum += probs[static_cast<size_t>(e)];
  }
  for (float& p : probs) p /= sum;

  // The k most probable experts; among equal probabilities the lower index wins (moe.h says why).
  std::vector<int64_t> order(static_cast<size_t>(experts));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int64_t a, int64_t b) {
    const float pa = probs[static_cast<size_t>(a)], pb = probs[static_cast<size_t>(b)];
    return pa > pb || (pa == pb && a < b);
  });

  std::vector<ExpertChoice> chosen;
  float chosen_sum = 0.0f;
  for (int64_t i = 0; i < top_k; ++i) {
    const int64_t e = order[static_cast<size_t>(i)];
    chosen.push_back({e, probs[static_cast<size_t>(e)]});
    chosen_sum += probs[static_cast<size_t>(e)];
  }
  if (norm_topk_prob) {
    for (ExpertChoice& choice : chosen) choice.weight /= chosen_sum;
  }
  return chosen;
}

GroupLimitedRouting group_limited_routing(const ModelConfig& c) {
  return GroupLimitedRouting{.top_k = c.num_experts_per_tok,
                             .n_group = c.n_group,
                             .topk_group = c.topk_group,
                             .norm_topk_prob = c.norm_topk_prob,
                             .routed_scaling_factor = static_cast<float>(c.routed_scaling_factor)};
}

namespace {

// Indices of the k largest values, largest first; equal values: the lower index first.
std::vector<int64_t> top_indices(const std::vector<float>& values, int64_t k) {
  std::vector<int64_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    const float va = values[static_cast<size_t>(a)], vb = values[static_cast<size_t>(b)];
    return va > vb || (va == vb && a < b);
  });
  order.resize(static_cast<size_t>(k));
  return order;
}

}  // namespace

std::vector<ExpertChoice> route_token_group_limited(std::span<const float> router_logits,
                                                   std::span<const float> score_bias, const GroupLimitedRouting& r) {
  const int64_t experts = static_cast<int64_t>(router_logits.size());
  TACHYON_CHECK(static_cast<int64_t>(score_bias.size()) == experts)
      << "e_score_correction_bias has " << score_bias.size() << " values for " << experts << " experts";
  TACHYON_CHECK(r.n_group >= 1 && experts % r.n_group == 0 && experts / r.n_group >= 2)
      << experts << " experts do not split into n_group " << r.n_group << " groups of at least 2";
  TACHYON_CHECK(r.topk_group >= 1 && r.topk_group <= r.n_group) << "topk_group " << r.topk_group << " of "
                                                                 << r.n_group << " groups";
  TACHYON_CHECK(r.top_k >= 1 && r.top_k <= experts) << "top-k of " << r.top_k << " among " << experts << " experts";
  const int64_t group_size = experts / r.n_group;

  std::vector<float> scores(static_cast<size_t>(experts)), choice(static_cast<size_t>(experts));  // [num_experts]
  for (int64_t e = 0; e < experts; ++e) {
    scores[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-router_logits[static_cast<size_t>(e)]));
    choice[static_cast<size_t>(e)] = scores[static_cast<size_t>(e)] + score_bias[static_cast<size_t>(e)];
  }
  // Each group is scored by its two best choice values; the best topk_group groups stay.
  std::vector<float> group_scores(static_cast<size_t>(r.n_group));  // [n_group]
  for (int64_t g = 0; g < r.n_group; ++g) {
    std::vector<float> members(choice.begin() + g * group_size, choice.begin() + (g + 1) * group_size);
    const std::vector<int64_t> best = top_indices(members, 2);
    group_scores[static_cast<size_t>(g)] =
        members[static_cast<size_t>(best[0])] + members[static_cast<size_t>(best[1])];
  }
  std::vector<bool> kept(static_cast<size_t>(r.n_group), false);
  for (int64_t g : top_indices(group_scores, r.topk_group)) kept[static_cast<size_t>(g)] = true;
  std::vector<float> masked(static_cast<size_t>(experts));  // [num_experts]: 0.0 outside the kept groups
  for (int64_t e = 0; e < experts; ++e) {
    masked[static_cast<size_t>(e)] = kept[static_cast<size_t>(e / group_size)] ? choice[static_cast<size_t>(e)] : 0.0f;
  }

  // The weights are the chosen experts' sigmoid scores: the bias picked them, it does not weigh them.
  std::vector<ExpertChoice> chosen;
  float sum = 0.0f;
  for (int64_t e : top_indices(masked, r.top_k)) {
    chosen.push_back({e, scores[static_cast<size_t>(e)]});
    sum += scores[static_cast<size_t>(e)];
  }
  for (ExpertChoice& c : chosen) {
    if (r.norm_topk_prob) c.weight /= sum + 1e-20f;
    c.weight *= r.routed_scaling_factor;
  }
  return chosen;
}

void expert_mlp(const ModelConfig& c, const LayerWeights& w, int64_t expert, const float* x, float* out) {
  const int64_t hidden = c.hidden_size, inter = c.moe_intermediate_size;
  const float* gate_up_weight = w.experts_gate_up.data() + expert * 2 * inter * hidden;  // [2 * inter, hidden]
  const float* down_weight = w.experts_down.data() + expert * hidden * inter;            // [hidden, inter]
  std::vector<float> gate_up(static_cast<size_t>(2 * inter));  // [2 * inter]: [gate | up]
  cpu::linear(gate_up.data(), x, gate_up_weight, nullptr, 1, hidden, 2 * inter);
  std::vector<float> activated(static_cast<size_t>(inter));  // [inter]
  cpu::silu_and_mul(activated.data(), gate_up.data(), 1, inter);
  cpu::linear(out, activated.data(), down_weight, nullptr, 1, inter, hidden);
}

// out: [n, hidden] += the shared expert's SwiGLU MLP of x: [n, hidden] (DeepSeek; every token).
void add_shared_expert(const ModelConfig& c, const LayerWeights& w, std::span<const float> x, int64_t n,
                       std::vector<float>& out) {
  if (c.n_shared_experts == 0) return;
  const int64_t hidden = c.hidden_size, inter = c.moe_intermediate_size * c.n_shared_experts;
  TACHYON_CHECK(static_cast<int64_t>(w.shared_gate_up.size()) == 2 * inter * hidden &&
                static_cast<int64_t>(w.shared_down.size()) == hidden * inter)
      << "moe_mlp: the layer has no shared expert of width " << inter;
  std::vector<float> gate_up(static_cast<size_t>(n * 2 * inter));  // [n, 2 * inter]
  cpu::linear(gate_up.data(), x.data(), w.shared_gate_up.data(), nullptr, n, hidden, 2 * inter);
  std::vector<float> activated(static_cast<size_t>(n * inter));  // [n, inter]
  cpu::silu_and_mul(activated.data(), gate_up.data(), n, inter);
  std::vector<float> shared(static_cast<size_t>(n * hidden));  // [n, hidden]
  cpu::linear(shared.data(), activated.data(), w.shared_down.data(), nullptr, n, inter, hidden);
  cpu::add_inplace(out.data(), shared.data(), n * hidden);
}

std::vector<float> moe_routed(const ModelConfig& c, const LayerWeights& w, std::span<const float> x, int64_t n,
                              ExpertRange held, std::vector<float>* router_logits) {
  const int64_t hidden = c.hidden_size, experts = c.num_experts, inter = c.moe_intermediate_size;
  TACHYON_CHECK(held.begin >= 0 && held.count >= 1 && held.begin + held.count <= experts)
      << "moe_mlp: experts [" << held.begin << ", " << held.begin + held.count << ") of " << experts;
  TACHYON_CHECK(static_cast<int64_t>(w.router.size()) == experts * hidden &&
                static_cast<int64_t>(w.experts_gate_up.size()) == held.count * 2 * inter * hidden &&
                static_cast<int64_t>(w.experts_down.size()) == held.count * hidden * inter)
      << "moe_mlp: the layer's weights are not those of a MoE layer holding " << held.count << " of " << experts
      << " experts of width " << inter;
  TACHYON_CHECK(static_cast<int64_t>(x.size()) == n * hidden) << "moe_mlp: " << x.size() << " values for " << n
                                                               << " tokens of " << hidden;
  const bool grouped = c.router == RouterKind::kSigmoidGroupLimited;
  const GroupLimitedRouting routing = group_limited_routing(c);

  std::vector<float> logits(static_cast<size_t>(n * experts));  // [n, num_experts]
  cpu::linear(logits.data(), x.data(), w.router.data(), nullptr, n, hidden, experts);

  std::vector<float> out(static_cast<size_t>(n * hidden), 0.0f);  // [n, hidden]
  std::vector<float> expert_out(static_cast<size_t>(hidden));     // [hidden]
  for (int64_t t = 0; t < n; ++t) {
    const auto token_logits = std::span<const float>(logits).subspan(t * experts, experts);
    std::vector<ExpertChoice> chosen = grouped ? route_token_group_limited(token_logits, w.router_bias, routing)
                                               : route_token(token_logits, c.num_experts_per_tok, c.norm_topk_prob);
    // Summed in expert order, as transformers adds each expert's weighted output in turn: the
    // same f32 additions, so the reference differs from it only inside the matrix products.
    std::sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) { return a.expert < b.expert; });
    float* row = out.data() + t * hidden;
    for (const ExpertChoice& choice : chosen) {
      if (choice.expert < held.begin || choice.expert >= held.begin + held.count) continue;  // another rank's
      expert_mlp(c, w, choice.expert - held.begin, x.data() + t * hidden, expert_out.data());
      for (int64_t i = 0; i < hidden; ++i) row[i] += choice.weight * expert_out[static_cast<size_t>(i)];
    }
  }
  if (router_logits) *router_logits = std::move(logits);
  return out;
}

std::vector<float> moe_mlp(const ModelConfig& c, const LayerWeights& w, std::span<const float> x, int64_t n,
                           std::vector<float>* router_logits) {
  std::vector<float> out = moe_routed(c, w, x, n, ExpertRange{0, c.num_experts}, router_logits);
  // transformers adds the shared expert after the routed sum: routed + shared.
  add_shared_expert(c, w, x, n, out);
  return out;
}

}  // namespace tachyon::model
