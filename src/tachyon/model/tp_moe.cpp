// The MoE block of a TP rank (see tp_moe.h): which half of moe_mlp is summed over the ranks
// depends only on how the experts were sharded.
#include "tachyon/model/tp_moe.h"

#include <algorithm>

#include "tachyon/base/check.h"
#include "tachyon/kernels/linear.h"
#include "tachyon/model/moe.h"

namespace tachyon::model::detail {

void sum_in_rank_order(dist::Communicator& group, std::vector<float>& values) {
  const size_t count = values.size();
  std::vector<float> gathered(count * static_cast<size_t>(group.size()));  // [size][count]
  group.all_gather(values.data(), gathered.data(), count * sizeof(float), nullptr);
  std::copy_n(gathered.data(), count, values.data());
  for (int r = 1; r < group.size(); ++r) {
    kernels::cpu::add_inplace(values.data(), gathered.data() + static_cast<size_t>(r) * count,
                              static_cast<int64_t>(count));
  }
}

std::vector<float> parallel_moe(const ModelConfig& c, const LayerWeights& w, const TensorParallelSeams& tp,
                                std::span<const float> x, int64_t n, std::vector<float>* router_logits) {
  const ExpertRange held{tp.expert_begin, tp.expert_count > 0 ? tp.expert_count : c.num_experts};
  std::vector<float> out = moe_routed(c, w, x, n, held, router_logits);  // [n, hidden]
  if (tp.group == nullptr) {
    add_shared_expert(c, w, x, n, out);
    return out;
  }
  if (tp.expert_parallel) {
    sum_in_rank_order(*tp.group, out);  // the combine: every token's experts, from whichever rank holds them
    add_shared_expert(c, w, x, n, out);  // replicated: the full shared expert on every rank
    return out;
  }
  add_shared_expert(c, w, x, n, out);  // this rank's slice of the shared expert: a partial product too
  tp.group->all_reduce(out.data(), out.data(), out.size(), dist::ReduceType::kF32, nullptr);
  return out;
}

}  // namespace tachyon::model::detail
