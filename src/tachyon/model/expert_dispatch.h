// Internal to model/: the routed experts of one MoE layer under expert parallelism, dispatched
// and combined with all_to_all_v over the EP group (G ranks; rank g holds experts
// [g * E / G, (g + 1) * E / G) whole). Each rank is the SOURCE of some tokens (its rows of x):
//   route     the replicated router picks each source token's k experts (moe.h's routing)
//   dispatch  each token row goes once to every rank holding at least one of its experts, with
//             the ids of those experts ([top_k] int32, -1 padded); one all_gather of the [G]
//             row counts first, so every rank knows what it receives (on CPU thread ranks a
//             host exchange per MoE layer; a GPU backend would keep it on the device)
//   compute   the owner runs each (row, expert) pair through expert_mlp
//   return    the outputs go back by the reverse all_to_all_v, one [hidden] row per pair
//   combine   the source adds weight * output per token in EXPERT INDEX order, the same f32
//             statements as moe_routed: the routed sum of a token is bit-identical to the
//             single rank's whatever G is, given the same router logits and expert inputs.
// A rank with no source rows (an idle data-parallel rank) still takes part in every exchange.
// Tests: tests/unit/test_expert_dispatch.cpp (against moe_routed at G = 1, 2, 3, 4, 6),
// tests/unit/test_tp_families.cpp and test_dp_families.cpp (whole models).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/dist/communicator.h"
#include "tachyon/model/model_config.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model::detail {

// x: [n, hidden] this rank's source rows (n may be 0); w holds this rank's experts
// [expert_begin, expert_begin + num_experts / ep.size()) stacked as local experts 0.. .
// Returns [n, hidden]: each source token's weighted routed sum (no shared expert).
// router_logits, when given, receives [n, num_experts].
std::vector<float> dispatch_experts(const ModelConfig& config, const LayerWeights& w, dist::Communicator& ep,
                                    std::span<const float> x, int64_t n, std::vector<float>* router_logits);

}  // namespace tachyon::model::detail
