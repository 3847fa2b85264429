// Internal to model/: the mixture-of-experts block of one rank of a TP group (dense_forward.h's
// seams), in the two layouts tp_shard.h shards the experts in:
//   tensor parallel (default)  every expert's intermediate dim and the shared expert's are split
//                              over the ranks, as a dense MLP's; the router is replicated, so every
//                              rank routes every token alike. The routed and shared partial
//                              products add into one [n, hidden] and ONE all-reduce per layer
//                              sums them, as after a dense MLP's down.
//   expert parallel            (--enable-expert-parallel, and every --dp run) the EP group's rank
//                              g holds experts [g * E / G, (g + 1) * E / G) whole. The tokens are
//                              replicated over the TP group (after the attention all-reduce), so
//                              TP rank t is the source of rows [t * n / tp, (t + 1) * n / tp) only:
//                              it sends each to the ranks holding its experts and combines what
//                              comes back in expert index order by all_to_all_v
//                              (expert_dispatch.h), adds the shared expert (held whole on every
//                              rank) to those rows, and one all_gatherv over the TP group
//                              reassembles [n, hidden] on every TP rank. The routed sum of a token
//                              is added as the single rank adds it, so EP is reproducible and
//                              identical on every rank of a TP group.
// Unsharded (group == nullptr) it is moe_mlp exactly.
// Tests: tests/unit/test_tp_families.cpp, test_expert_dispatch.cpp, test_dp_families.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/model/dense_forward.h"
#include "tachyon/model/model_config.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model::detail {

// x: [n, hidden] post-attention-normed hidden states -> [n, hidden], the layer's full MoE output
// on every rank of the TP group. router_logits, when given, receives [n, num_experts]
// (identical on all ranks). n may be 0 under expert parallelism (an idle data-parallel rank
// serving the other ranks' tokens).
std::vector<float> parallel_moe(const ModelConfig& config, const LayerWeights& w, const TensorParallelSeams& tp,
                                std::span<const float> x, int64_t n, std::vector<float>* router_logits);

}  // namespace tachyon::model::detail
