#include "tachyon/model/tp_dense_model.h"

#include "tachyon/base/check.h"
#include "tachyon/model/dense_forward.h"
#include "tachyon/model/rope.h"
#include "tachyon/model/tp_moe.h"

namespace tachyon::model {

TpDenseModel::TpDenseModel(TpShard shard, dist::Communicator& group, dist::Communicator* ep_group)
    : TpDenseModel(std::make_shared<const TpShard>(std::move(shard)), group, ep_group) {}

TpDenseModel::TpDenseModel(std::shared_ptr<const TpShard> shard, dist::Communicator& group,
                           dist::Communicator* ep_group)
    : shard_(std::move(shard)),
      group_(group),
      ep_group_(shard_->expert_parallel ? (ep_group ? ep_group : &group) : nullptr),
      inv_freq_(rope_inv_freq(shard_->weights.config)) {
  TACHYON_CHECK(shard_->tp_rank == group.rank() && shard_->tp_size == group.size())
      << "shard of rank " << shard_->tp_rank << " of " << shard_->tp_size << " given to rank " << group.rank()
      << " of a " << group.size() << "-rank TP group";
}

TpDenseModel::TpDenseModel(const ModelWeights& full, dist::Communicator& group, bool expert_parallel)
    : TpDenseModel(shard_weights(full, group.rank(), group.size(), expert_parallel), group) {}

std::vector<float> TpDenseModel::forward(const ForwardBatch& batch, AttentionBackend& attention,
                                         const ForwardHook& hook) const {
  const detail::TensorParallelSeams seams{.group = &group_,
                                         .vocab_begin = shard_->vocab_begin,
                                         .vocab_rows = shard_->vocab_rows,
                                         .expert_parallel = shard_->expert_parallel,
                                         .expert_begin = shard_->expert_begin,
                                         .expert_count = shard_->expert_count,
                                         .ep_group = ep_group_};
  return detail::dense_forward(shard_->weights, inv_freq_, seams, batch, attention, hook);
}

void TpDenseModel::idle_forward() const {
  TACHYON_CHECK(ep_group_ != nullptr) << "idle_forward is for an expert-parallel rank";
  const detail::TensorParallelSeams seams{
      .group = &group_,
      .expert_parallel = true,
      .expert_begin = shard_->expert_begin,
      .expert_count = shard_->expert_count,
      .ep_group = ep_group_};
  const ModelConfig& c = config();
  const std::vector<LayerKinds> plan = layer_plan(c);
  for (size_t l = 0; l < plan.size(); ++l) {
    if (plan[l].mlp == MlpKind::kExperts) detail::parallel_moe(c, shard_->weights.layers[l], seams, {}, 0, nullptr);
  }
}

std::vector<float> TpDenseModel::forward(std::span<const int32_t> tokens, SequenceKvCache& cache, bool all_logits,
                                         const ForwardHook& hook) const {
  return detail::sequence_forward(config(), tokens, cache, all_logits,
                                  [&](const ForwardBatch& batch, AttentionBackend& attention) {
                                    return forward(batch, attention, hook);
                                  });
}

}  // namespace tachyon::model
