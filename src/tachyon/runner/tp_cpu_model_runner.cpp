#include "tachyon/runner/tp_cpu_model_runner.h"

#include "tachyon/base/check.h"
#include "tachyon/runner/dcp_attention_backend.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/plan_sampling.h"
#include "tachyon/runner/tp_kv_rows.h"

namespace tachyon::runner {

TpCpuModelRunner::Rank::Rank(dist::CpuWorld& world, int rank, model::TpShard shard, int32_t num_blocks,
                             int32_t block_size, bool fp8_kv_cache, dist::CpuWorld* dcp_world, int dcp_rank)
    : comm(world, rank),
      dcp_comm(dcp_world ? std::make_unique<dist::CpuCommunicator>(*dcp_world, dcp_rank) : nullptr),
      model(std::move(shard), comm),
      cache(model.config(), num_blocks, block_size, model::MlaAttentionForm::kAbsorbed, fp8_kv_cache) {}

TpCpuModelRunner::TpCpuModelRunner(const model::ModelWeights& full, int tp_size, int32_t num_blocks,
                                   int32_t block_size, bool expert_parallel, bool fp8_kv_cache,
                                   model::DcpOptions dcp, TboOptions tbo)
    : TpCpuModelRunner(model::shard_tp_group(full, tp_size, expert_parallel), full.config, num_blocks, block_size,
                       expert_parallel, fp8_kv_cache, dcp, tbo) {}

TpCpuModelRunner::TpCpuModelRunner(std::vector<model::TpShard> shards, const model::ModelConfig& config,
                                   int32_t num_blocks, int32_t block_size, bool expert_parallel, bool fp8_kv_cache,
                                   model::DcpOptions dcp, TboOptions tbo)
    : vocab_size_(config.vocab_size),
      world_((model::check_tp_size(config, static_cast<int>(shards.size()), expert_parallel),
              static_cast<int>(shards.size()))),
      dcp_(dcp),
      tbo_(tbo),
      workers_(static_cast<int>(shards.size()), [this](const std::string& reason) { abort_worlds(reason); }) {
  const int tp_size = static_cast<int>(shards.size());
  TACHYON_CHECK(tp_size >= 2) << "TpCpuModelRunner needs tp_size >= 2, got " << tp_size;
  TACHYON_CHECK(!tbo.enabled || (expert_parallel && dcp.size == 1))
      << "two-batch overlap runs with expert parallelism and without --dcp only (the combinations its tests cover)";
  // DCP groups are consecutive ranks of the TP group (dist::RankLayout); a rank caches 1/dcp of each block.
  TACHYON_CHECK(dcp.size >= 1 && tp_size % dcp.size == 0 && dcp.interleave >= 1 &&
                block_size % (dcp.size * dcp.interleave) == 0)
      << "decode context parallel size " << dcp.size << " (interleave " << dcp.interleave << ") must divide tp "
      << tp_size << ", and dcp x interleave the block size " << block_size;
  for (int g = 0; dcp.size > 1 && g < tp_size / dcp.size; ++g) dcp_worlds_.push_back(std::make_unique<dist::CpuWorld>(dcp.size));
  for (int r = 0; r < tp_size; ++r) {
    const model::TpShard& shard = shards[static_cast<size_t>(r)];
    TACHYON_CHECK(shard.tp_rank == r && shard.tp_size == tp_size && shard.expert_parallel == expert_parallel)
        << "internal: shard " << r << " of a TP group of " << tp_size << " is rank " << shard.tp_rank << " of "
        << shard.tp_size << (shard.expert_parallel ? " with" : " without") << " expert parallelism";
    dist::CpuWorld* dcp_world = dcp.size > 1 ? dcp_worlds_[static_cast<size_t>(r / dcp.size)].get() : nullptr;
    ranks_.push_back(std::make_unique<Rank>(world_, r, std::move(shards[static_cast<size_t>(r)]), num_blocks,
                                            block_size / dcp.size, fp8_kv_cache, dcp_world, r % dcp.size));
  }
  std::vector<PagedKvCache*> caches;
  for (const std::unique_ptr<Rank>& rank : ranks_) caches.push_back(&rank->cache);
  kv_rows_ = make_tp_kv_rows(caches, config, dcp);
}

TpCpuModelRunner::~TpCpuModelRunner() = default;

void TpCpuModelRunner::abort_worlds(const std::string& reason) {
  world_.abort(reason);
  for (const std::unique_ptr<dist::CpuWorld>& dcp_world : dcp_worlds_) dcp_world->abort(reason);
}

core::StepOutput TpCpuModelRunner::run(const core::StepPlan& plan) {
  if (plan.empty()) return {};
  // Every rank holds the whole residual stream after its all-reduces (with DCP too: each rank's
  // attention output is merged over its DCP group before them), so rank 0's last hidden state
  // before the final norm is the model's (what an MTP drafter reads; the CPU runner's hook).
  std::vector<float> hidden;
  if (tbo_.enabled && plan.sequences.size() >= 2) {  // one sequence: nothing to overlap, one batch
    TACHYON_CHECK(dcp_.size == 1) << "two-batch overlap with decode context parallelism is not verified by any test";
    const TboSplit split = split_micro_batches(plan);
    workers_.run([&](int rank) {
      Rank& me = *ranks_[static_cast<size_t>(rank)];
      me.logits = run_tbo_rank_step(me.model, me.cache, me.comm, split, tbo_,
                                    plan.return_hidden_states && rank == 0 ? &hidden : nullptr);
    });
    core::StepOutput output = sample_plan_rows(plan, ranks_[0]->logits, vocab_size_);
    output.hidden_states = std::move(hidden);
    return output;
  }
  workers_.run([&](int rank) {
    Rank& me = *ranks_[static_cast<size_t>(rank)];
    const model::ForwardBatch batch{plan.token_ids, plan.positions, plan.logits_rows};
    const model::ForwardHook hook = plan.return_hidden_states && rank == 0 ? model::keep_final_hidden(hidden) : nullptr;
    if (me.dcp_comm) {
      DcpAttentionBackend attention(me.model.config(), me.cache, plan, *me.dcp_comm, dcp_.interleave);
      me.logits = me.model.forward(batch, attention, hook);
      return;
    }
    PagedAttentionBackend attention(me.model.config(), me.cache, plan);
    me.logits = me.model.forward(batch, attention, hook);
  });
  core::StepOutput output = sample_plan_rows(plan, ranks_[0]->logits, vocab_size_);
  output.hidden_states = std::move(hidden);
  return output;
}

}  // namespace tachyon::runner
