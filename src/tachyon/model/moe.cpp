// Qwen3-MoE's router and experts on the CPU: plain loops, one token at a time (see moe.h).
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

std::vector<float> moe_mlp(const ModelConfig& c, const LayerWeights& w, std::span<const float> x, int64_t n,
                           std::vector<float>* router_logits) {
  const int64_t hidden = c.hidden_size, experts = c.num_experts, inter = c.moe_intermediate_size;
  TACHYON_CHECK(static_cast<int64_t>(w.router.size()) == experts * hidden &&
                static_cast<int64_t>(w.experts_gate_up.size()) == experts * 2 * inter * hidden &&
                static_cast<int64_t>(w.experts_down.size()) == experts * hidden * inter)
      << "moe_mlp: the layer's weights are not those of a MoE layer with " << experts << " experts of width " << inter;
  TACHYON_CHECK(static_cast<int64_t>(x.size()) == n * hidden) << "moe_mlp: " << x.size() << " values for " << n
                                                               << " tokens of " << hidden;

  std::vector<float> logits(static_cast<size_t>(n * experts));  // [n, num_experts]
  cpu::linear(logits.data(), x.data(), w.router.data(), nullptr, n, hidden, experts);

  std::vector<float> out(static_cast<size_t>(n * hidden), 0.0f);  // [n, hidden]
  std::vector<float> expert_out(static_cast<size_t>(hidden));     // [hidden]
  for (int64_t t = 0; t < n; ++t) {
    std::vector<ExpertChoice> chosen = route_token(std::span<const float>(logits).subspan(t * experts, experts),
                                                   c.num_experts_per_tok, c.norm_topk_prob);
    // Summed in expert order, as transformers adds each expert's weighted output in turn: the
    // same f32 additions, so the reference differs from it only inside the matrix products.
    std::sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) { return a.expert < b.expert; });
    float* row = out.data() + t * hidden;
    for (const ExpertChoice& choice : chosen) {
      expert_mlp(c, w, choice.expert, x.data() + t * hidden, expert_out.data());
      for (int64_t i = 0; i < hidden; ++i) row[i] += choice.weight * expert_out[static_cast<size_t>(i)];
    }
  }
  if (router_logits) *router_logits = std::move(logits);
  return out;
}

}  // namespace tachyon::model
