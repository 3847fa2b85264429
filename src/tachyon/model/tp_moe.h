// Internal to model/: the mixture-of-experts block of one rank of a TP group (dense_forward.h's
// seams), in the two layouts tp_shard.h shards the experts in:
//   tensor parallel (default)  every expert's intermediate dim and the shared expert's are split
//                              over the ranks, as a dense MLP's; the router is replicated, so every
//                              rank routes every token alike. The routed and shared partial
//                              products add into one [n, hidden] and ONE all-reduce per layer
//                              sums them, as after a dense MLP's down.
//   expert parallel            (--enable-expert-parallel) rank r holds experts
//                              [r * E / N, (r + 1) * E / N) whole and runs them on the tokens routed
//                              there. Dispatch needs no collective: activations are replicated after
//                              the attention all-reduce, so every rank routes every token. The
//                              combine sums the ranks' routed outputs in FIXED rank order 0..N-1
//                              (all_gather, then a local ordered sum), whatever the backend's
//                              all_reduce order, so EP is reproducible and identical on all ranks;
//                              the shared expert is replicated and added after, as the reference
//                              adds it after the routed sum.
// Unsharded (group == nullptr) it is moe_mlp exactly.
// Tests: tests/unit/test_tp_families.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/model/dense_forward.h"
#include "tachyon/model/model_config.h"
#include "tachyon/model/model_weights.h"

namespace tachyon::model::detail {

// x: [n, hidden] post-attention-normed hidden states -> [n, hidden], the layer's full MoE output
// on every rank. router_logits, when given, receives [n, num_experts] (identical on all ranks).
std::vector<float> parallel_moe(const ModelConfig& config, const LayerWeights& w, const TensorParallelSeams& tp,
                                std::span<const float> x, int64_t n, std::vector<float>* router_logits);

// values: [count] f32 on every rank -> the sum over the group, added in rank order 0..size-1 on
// every rank (bit-identical everywhere and from run to run, on any backend).
void sum_in_rank_order(dist::Communicator& group, std::vector<float>& values);

}  // namespace tachyon::model::detail
