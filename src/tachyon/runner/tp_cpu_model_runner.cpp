#include "tachyon/runner/tp_cpu_model_runner.h"

#include "tachyon/base/check.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/plan_sampling.h"

namespace tachyon::runner {

TpCpuModelRunner::Rank::Rank(dist::CpuWorld& world, int rank, model::TpShard shard, int32_t num_blocks,
                             int32_t block_size, bool fp8_kv_cache)
    : comm(world, rank),
      model(std::move(shard), comm),
      cache(model.config(), num_blocks, block_size, model::MlaAttentionForm::kAbsorbed, fp8_kv_cache) {}

TpCpuModelRunner::TpCpuModelRunner(const model::ModelWeights& full, int tp_size, int32_t num_blocks,
                                   int32_t block_size, bool expert_parallel, bool fp8_kv_cache)
    : vocab_size_(full.config.vocab_size),
      world_((model::check_tp_size(full.config, tp_size, expert_parallel), tp_size)),
      workers_(tp_size) {
  TACHYON_CHECK(tp_size >= 2) << "TpCpuModelRunner needs tp_size >= 2, got " << tp_size;
  for (int r = 0; r < tp_size; ++r) {
    ranks_.push_back(std::make_unique<Rank>(world_, r, model::shard_weights(full, r, tp_size, expert_parallel),
                                            num_blocks, block_size, fp8_kv_cache));
  }
}

TpCpuModelRunner::~TpCpuModelRunner() = default;

core::StepOutput TpCpuModelRunner::run(const core::StepPlan& plan) {
  if (plan.empty()) return {};
  TACHYON_CHECK(!plan.return_hidden_states)
      << "the tensor-parallel CPU runner does not return hidden states (MTP drafting needs --tp 1)";
  workers_.run([&](int rank) {
    Rank& me = *ranks_[static_cast<size_t>(rank)];
    PagedAttentionBackend attention(me.model.config(), me.cache, plan);
    me.logits = me.model.forward(model::ForwardBatch{plan.token_ids, plan.positions, plan.logits_rows}, attention);
  });
  return sample_plan_rows(plan, ranks_[0]->logits, vocab_size_);
}

}  // namespace tachyon::runner
