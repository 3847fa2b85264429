// The MoE block of a TP rank (see tp_moe.h): which half of moe_mlp is summed over the ranks
// depends only on how the experts were sharded.
#include "tachyon/model/tp_moe.h"

#include "tachyon/base/check.h"
#include "tachyon/kernels/linear.h"
#include "tachyon/model/expert_dispatch.h"
#include "tachyon/model/moe.h"

namespace tachyon::model::detail {
namespace {

// Expert parallelism: this TP rank routes, dispatches and combines its slice of the replicated
// tokens, then the TP group gathers the slices.
std::vector<float> expert_parallel_moe(const ModelConfig& c, const LayerWeights& w, const TensorParallelSeams& tp,
                                       std::span<const float> x, int64_t n, std::vector<float>* router_logits) {
  TACHYON_CHECK(tp.ep_group != nullptr) << "expert parallelism without an expert-parallel group";
  const int64_t hidden = c.hidden_size;
  const int tp_size = tp.group ? tp.group->size() : 1, tp_rank = tp.group ? tp.group->rank() : 0;
  auto first_row = [&](int rank) { return n * rank / tp_size; };
  const int64_t begin = first_row(tp_rank), rows = first_row(tp_rank + 1) - begin;
  const std::span<const float> mine = x.subspan(static_cast<size_t>(begin * hidden), static_cast<size_t>(rows * hidden));
  std::vector<float> out = dispatch_experts(c, w, *tp.ep_group, mine, rows, nullptr);  // [rows, hidden]
  if (rows > 0) add_shared_expert(c, w, mine, rows, out);  // replicated: the full shared expert
  if (router_logits) {  // the hook's view: every token's logits
    router_logits->assign(static_cast<size_t>(n * c.num_experts), 0.0f);
    if (n > 0) kernels::cpu::linear(router_logits->data(), x.data(), w.router.data(), nullptr, n, hidden, c.num_experts);
  }
  if (tp_size == 1) return out;
  std::vector<size_t> counts;  // [tp] bytes of each TP rank's slice
  for (int r = 0; r < tp_size; ++r) counts.push_back(static_cast<size_t>((first_row(r + 1) - first_row(r)) * hidden) * sizeof(float));
  std::vector<float> gathered(static_cast<size_t>(n * hidden));  // [n, hidden]
  const dist::GatherItem item{out.data(), out.size() * sizeof(float), gathered.data(), counts};
  tp.group->all_gatherv({&item, 1}, nullptr);
  return gathered;
}

}  // namespace

std::vector<float> parallel_moe(const ModelConfig& c, const LayerWeights& w, const TensorParallelSeams& tp,
                                std::span<const float> x, int64_t n, std::vector<float>* router_logits) {
  if (tp.expert_parallel) return expert_parallel_moe(c, w, tp, x, n, router_logits);
  std::vector<float> out = moe_routed(c, w, x, n, ExpertRange{0, c.num_experts}, router_logits);  // [n, hidden]
  add_shared_expert(c, w, x, n, out);  // unsharded: the whole shared expert; TP: this rank's slice of it
  if (tp.group != nullptr)
    tp.group->all_reduce(out.data(), out.data(), out.size(), dist::ReduceType::kF32, nullptr);
  return out;
}

}  // namespace tachyon::model::detail
