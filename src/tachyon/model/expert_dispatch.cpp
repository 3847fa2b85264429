// Expert-parallel dispatch and combine over all_to_all_v (see expert_dispatch.h).
#include "tachyon/model/expert_dispatch.h"

#include <algorithm>

#include "tachyon/base/check.h"
#include "tachyon/kernels/linear.h"
#include "tachyon/model/moe.h"

namespace tachyon::model::detail {
namespace {

namespace cpu = kernels::cpu;

// One token's experts, in expert index order, with their weights: moe_routed's choice.
std::vector<ExpertChoice> choose_experts(const ModelConfig& c, const LayerWeights& w, std::span<const float> logits) {
  std::vector<ExpertChoice> chosen = c.router == RouterKind::kSigmoidGroupLimited
                                         ? route_token_group_limited(logits, w.router_bias, group_limited_routing(c))
                                         : route_token(logits, c.num_experts_per_tok, c.norm_topk_prob);
  std::sort(chosen.begin(), chosen.end(), [](const auto& a, const auto& b) { return a.expert < b.expert; });
  return chosen;
}

// [G] byte counts: counts[g] units of `unit` bytes each.
std::vector<size_t> bytes_of(std::span<const int64_t> counts, size_t unit) {
  std::vector<size_t> bytes;
  for (int64_t count : counts) bytes.push_back(static_cast<size_t>(count) * unit);
  return bytes;
}

// What this rank sends: per owner rank, the source tokens it needs (token order) and, per sent
// row, the [top_k] ids of the token's experts that owner holds (-1 padded); and per token and
// chosen expert (expert order), which owner computes it and at which pair index there.
struct DispatchPlan {
  std::vector<std::vector<ExpertChoice>> chosen;          // [n][top_k] in expert order
  std::vector<std::vector<int64_t>> rows_to;              // [G][rows to g] source token index
  std::vector<std::vector<int32_t>> ids_to;               // [G][rows to g * top_k] expert ids
  std::vector<int64_t> pairs_to;                          // [G] (row, expert) pairs g computes for us
  std::vector<std::vector<std::pair<int, int64_t>>> pair_of;  // [n][top_k] (owner, pair index there)
};

DispatchPlan plan_dispatch(const ModelConfig& c, const LayerWeights& w, std::span<const float> logits, int64_t n,
                           int ranks) {
  const int64_t experts = c.num_experts, top_k = c.num_experts_per_tok, per_rank = experts / ranks;
  DispatchPlan plan;
  plan.chosen.resize(static_cast<size_t>(n));
  plan.rows_to.resize(static_cast<size_t>(ranks));
  plan.ids_to.resize(static_cast<size_t>(ranks));
  plan.pairs_to.assign(static_cast<size_t>(ranks), 0);
  plan.pair_of.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    std::vector<ExpertChoice>& chosen = plan.chosen[static_cast<size_t>(t)];
    chosen = choose_experts(c, w, logits.subspan(static_cast<size_t>(t * experts), static_cast<size_t>(experts)));
    int last_owner = -1;
    int64_t slot = 0;
    for (const ExpertChoice& choice : chosen) {  // expert order, so each owner's experts are consecutive
      const int owner = static_cast<int>(choice.expert / per_rank);
      std::vector<int32_t>& ids = plan.ids_to[static_cast<size_t>(owner)];
      if (owner != last_owner) {  // the token's row goes to this owner once
        plan.rows_to[static_cast<size_t>(owner)].push_back(t);
        ids.resize(ids.size() + static_cast<size_t>(top_k), -1);
        last_owner = owner;
        slot = 0;
      }
      ids[ids.size() - static_cast<size_t>(top_k) + static_cast<size_t>(slot++)] = static_cast<int32_t>(choice.expert);
      plan.pair_of[static_cast<size_t>(t)].push_back({owner, plan.pairs_to[static_cast<size_t>(owner)]++});
    }
  }
  return plan;
}

}  // namespace

std::vector<float> dispatch_experts(const ModelConfig& c, const LayerWeights& w, dist::Communicator& ep,
                                    std::span<const float> x, int64_t n, std::vector<float>* router_logits) {
  const int64_t hidden = c.hidden_size, experts = c.num_experts, top_k = c.num_experts_per_tok;
  const int ranks = ep.size(), me = ep.rank();
  TACHYON_CHECK(experts % ranks == 0) << "expert parallel size " << ranks << " does not divide num_experts " << experts;
  const int64_t per_rank = experts / ranks, expert_begin = me * per_rank;
  TACHYON_CHECK(static_cast<int64_t>(w.router.size()) == experts * hidden &&
                static_cast<int64_t>(w.experts_down.size()) == per_rank * hidden * c.moe_intermediate_size)
      << "expert dispatch: rank " << me << " of " << ranks << " does not hold " << per_rank << " whole experts";
  TACHYON_CHECK(static_cast<int64_t>(x.size()) == n * hidden) << "expert dispatch: " << x.size() << " values for "
                                                              << n << " tokens of " << hidden;

  std::vector<float> logits(static_cast<size_t>(n * experts));  // [n, num_experts]
  if (n > 0) cpu::linear(logits.data(), x.data(), w.router.data(), nullptr, n, hidden, experts);
  const DispatchPlan plan = plan_dispatch(c, w, logits, n, ranks);

  // Every rank learns how many rows each rank sends each rank: counts[src * G + dst].
  std::vector<int64_t> rows_sent(static_cast<size_t>(ranks)), counts(static_cast<size_t>(ranks * ranks));
  for (int g = 0; g < ranks; ++g) rows_sent[static_cast<size_t>(g)] = static_cast<int64_t>(plan.rows_to[g].size());
  ep.all_gather(rows_sent.data(), counts.data(), rows_sent.size() * sizeof(int64_t), nullptr);
  std::vector<int64_t> rows_received(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) rows_received[static_cast<size_t>(r)] = counts[static_cast<size_t>(r * ranks + me)];

  // Dispatch: the rows and their expert ids, packed by owner rank, in one all_to_all_v.
  std::vector<float> send_rows;  // [sum rows_sent, hidden]
  std::vector<int32_t> send_ids;  // [sum rows_sent, top_k]
  for (int g = 0; g < ranks; ++g) {
    for (int64_t t : plan.rows_to[static_cast<size_t>(g)])
      send_rows.insert(send_rows.end(), x.begin() + t * hidden, x.begin() + (t + 1) * hidden);
    send_ids.insert(send_ids.end(), plan.ids_to[g].begin(), plan.ids_to[g].end());
  }
  int64_t total_received = 0;
  for (int64_t rows : rows_received) total_received += rows;
  std::vector<float> recv_rows(static_cast<size_t>(total_received * hidden));  // [received, hidden]
  std::vector<int32_t> recv_ids(static_cast<size_t>(total_received * top_k));  // [received, top_k]
  const std::vector<size_t> row_send = bytes_of(rows_sent, hidden * sizeof(float)),
                            row_recv = bytes_of(rows_received, hidden * sizeof(float)),
                            id_send = bytes_of(rows_sent, top_k * sizeof(int32_t)),
                            id_recv = bytes_of(rows_received, top_k * sizeof(int32_t));
  const dist::AllToAllItem dispatch[] = {{send_rows.data(), row_send, recv_rows.data(), row_recv},
                                         {send_ids.data(), id_send, recv_ids.data(), id_recv}};
  ep.all_to_all_v(dispatch, nullptr);

  // Compute: every (row, expert) pair received, in arrival order, one [hidden] output each.
  std::vector<float> outputs;  // [pairs computed, hidden]
  std::vector<int64_t> pairs_back(static_cast<size_t>(ranks), 0);
  std::vector<float> expert_out(static_cast<size_t>(hidden));  // [hidden]
  int64_t row = 0;
  for (int r = 0; r < ranks; ++r) {
    for (int64_t i = 0; i < rows_received[static_cast<size_t>(r)]; ++i, ++row) {
      for (int64_t s = 0; s < top_k; ++s) {
        const int32_t expert = recv_ids[static_cast<size_t>(row * top_k + s)];
        if (expert < 0) break;
        TACHYON_CHECK(expert >= expert_begin && expert < expert_begin + per_rank)
            << "expert dispatch: rank " << me << " received a row for expert " << expert << ", which it does not hold";
        expert_mlp(c, w, expert - expert_begin, recv_rows.data() + row * hidden, expert_out.data());
        outputs.insert(outputs.end(), expert_out.begin(), expert_out.end());
        ++pairs_back[static_cast<size_t>(r)];
      }
    }
  }

  // Return: the outputs go back to their sources, which know how many pairs they asked for.
  int64_t total_pairs = 0;
  for (int64_t pairs : plan.pairs_to) total_pairs += pairs;
  std::vector<float> returned(static_cast<size_t>(total_pairs * hidden));  // [pairs asked, hidden] by owner
  const std::vector<size_t> out_send = bytes_of(pairs_back, hidden * sizeof(float)),
                            out_recv = bytes_of(plan.pairs_to, hidden * sizeof(float));
  const dist::AllToAllItem combine[] = {{outputs.data(), out_send, returned.data(), out_recv}};
  ep.all_to_all_v(combine, nullptr);

  // Combine in expert index order, as moe_routed adds a token's experts.
  std::vector<int64_t> first_pair(static_cast<size_t>(ranks), 0);  // [G] owner g's first pair in `returned`
  for (int g = 1; g < ranks; ++g) first_pair[g] = first_pair[g - 1] + plan.pairs_to[static_cast<size_t>(g - 1)];
  std::vector<float> out(static_cast<size_t>(n * hidden), 0.0f);  // [n, hidden]
  for (int64_t t = 0; t < n; ++t) {
    float* out_row = out.data() + t * hidden;
    const std::vector<ExpertChoice>& chosen = plan.chosen[static_cast<size_t>(t)];
    for (size_t k = 0; k < chosen.size(); ++k) {
      const auto [owner, pair] = plan.pair_of[static_cast<size_t>(t)][k];
      const float* result = returned.data() + (first_pair[static_cast<size_t>(owner)] + pair) * hidden;
      for (int64_t i = 0; i < hidden; ++i) out_row[i] += chosen[k].weight * result[i];
    }
  }
  if (router_logits) *router_logits = std::move(logits);
  return out;
}

}  // namespace tachyon::model::detail
