// TpDenseModel's forward over a micro-batch's communicator (see tbo_forward.h).
#include "tachyon/model/tbo_forward.h"

#include "tachyon/base/check.h"
#include "tachyon/model/dense_forward.h"
#include "tachyon/model/rope.h"

namespace tachyon::model {

std::vector<float> forward_over(const TpDenseModel& model, dist::Communicator& group, const ForwardBatch& batch,
                                AttentionBackend& attention, const ForwardHook& hook) {
  const TpShard& shard = model.shard();
  TACHYON_CHECK(group.rank() == shard.tp_rank && group.size() == shard.tp_size)
      << "internal: rank " << group.rank() << " of " << group.size() << " runs the shard of rank " << shard.tp_rank
      << " of " << shard.tp_size;
  const detail::TensorParallelSeams seams{.group = &group,
                                         .vocab_begin = shard.vocab_begin,
                                         .vocab_rows = shard.vocab_rows,
                                         .expert_parallel = shard.expert_parallel,
                                         .expert_begin = shard.expert_begin,
                                         .expert_count = shard.expert_count,
                                         .ep_group = shard.expert_parallel ? &group : nullptr};
  return detail::dense_forward(shard.weights, rope_inv_freq(shard.weights.config), seams, batch, attention, hook);
}

}  // namespace tachyon::model
