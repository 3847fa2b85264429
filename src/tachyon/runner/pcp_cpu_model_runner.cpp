// Prefill context parallelism on CPU thread ranks (see pcp_cpu_model_runner.h).
#include "tachyon/runner/pcp_cpu_model_runner.h"

#include <algorithm>

#include "tachyon/base/check.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/pcp_attention_backend.h"
#include "tachyon/runner/pcp_plan.h"
#include "tachyon/runner/plan_sampling.h"
#include "tachyon/runner/replicated_kv_rows.h"
#include "tachyon/runner/tp_kv_rows.h"

namespace tachyon::runner {

std::vector<float> run_pcp_rank_step(const model::ModelConfig& config, const PcpRankForward& forward,
                                     PagedKvCache& cache, const core::StepPlan& plan, dist::Communicator& group,
                                     PcpDcp dcp, std::vector<float>* hidden) {
  const PcpPlan pcp = build_pcp_plan(plan, group.size());
  std::vector<float> mine_hidden;  // the forward's rows' last hidden states, when asked
  const model::ForwardHook hook = hidden != nullptr ? model::keep_final_hidden(mine_hidden) : nullptr;
  if (!pcp.split) {  // decode: every PCP rank runs the whole step (replicated)
    const std::unique_ptr<model::AttentionBackend> attention = pcp_local_attention(config, cache, plan, dcp);
    std::vector<float> logits = forward({plan.token_ids, plan.positions, plan.logits_rows}, *attention, hook);
    if (hidden != nullptr) *hidden = std::move(mine_hidden);
    return logits;
  }
  const int rank = group.rank(), size = group.size();
  const core::StepPlan& local = pcp.local[static_cast<size_t>(rank)];
  PcpAttentionBackend attention(config, cache, plan, pcp, group, dcp);
  const std::vector<float> mine = forward({local.token_ids, local.positions, local.logits_rows}, attention, hook);
  // Every rank's logits rows, in rank order, then back in the plan's order.
  const size_t vocab = static_cast<size_t>(config.vocab_size);
  std::vector<size_t> counts(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) counts[static_cast<size_t>(r)] = pcp.logits_row_of[static_cast<size_t>(r)].size() * vocab * sizeof(float);
  std::vector<float> gathered(plan.logits_rows.size() * vocab);
  const dist::GatherItem item{mine.data(), mine.size() * sizeof(float), gathered.data(), counts};
  group.all_gatherv({&item, 1}, nullptr);
  std::vector<float> logits(gathered.size());
  size_t row = 0;
  for (int r = 0; r < size; ++r) {
    for (int64_t target : pcp.logits_row_of[static_cast<size_t>(r)]) {
      std::copy_n(gathered.data() + row * vocab, vocab, logits.data() + static_cast<size_t>(target) * vocab);
      ++row;
    }
  }
  if (hidden != nullptr) {  // every rank's rows, in rank order (pcp.gathered_tokens), then in plan order
    const auto h = static_cast<size_t>(config.hidden_size);
    std::vector<size_t> hidden_counts(static_cast<size_t>(size));
    for (int r = 0; r < size; ++r) {
      hidden_counts[static_cast<size_t>(r)] = pcp.rank_tokens[static_cast<size_t>(r)].size() * h * sizeof(float);
    }
    std::vector<float> rows(pcp.gathered_tokens.size() * h);
    const dist::GatherItem rows_item{mine_hidden.data(), mine_hidden.size() * sizeof(float), rows.data(),
                                     hidden_counts};
    group.all_gatherv({&rows_item, 1}, nullptr);
    hidden->assign(static_cast<size_t>(plan.num_tokens()) * h, 0.0f);
    for (size_t i = 0; i < pcp.gathered_tokens.size(); ++i) {
      std::copy_n(rows.data() + i * h, h, hidden->data() + static_cast<size_t>(pcp.gathered_tokens[i]) * h);
    }
  }
  return logits;
}

std::vector<float> run_pcp_rank_step(const model::DenseModel& model, PagedKvCache& cache, const core::StepPlan& plan,
                                     dist::Communicator& group, std::vector<float>* hidden) {
  const PcpRankForward forward = [&](const model::ForwardBatch& batch, model::AttentionBackend& attention,
                                     const model::ForwardHook& hook) { return model.forward(batch, attention, hook); };
  return run_pcp_rank_step(model.config(), forward, cache, plan, group, {}, hidden);
}

PcpCpuModelRunner::Rank::Rank(dist::ProcessGroups process_groups, std::shared_ptr<const model::TpShard> tp_shard,
                              const model::ModelConfig& config, int32_t num_blocks, int32_t block_size,
                              bool fp8_kv_cache)
    : groups(std::move(process_groups)),
      pcp(*groups.pcp),
      tp(*groups.tp),
      shard(tp_shard ? std::make_unique<model::TpDenseModel>(std::move(tp_shard), tp) : nullptr),
      cache(shard ? shard->config() : config, num_blocks, block_size, model::MlaAttentionForm::kAbsorbed,
            fp8_kv_cache) {}

PcpCpuModelRunner::Weights PcpCpuModelRunner::Weights::of(model::ModelWeights&& weights, int tp_size) {
  // --tp > 1 (refused by shard_tp_group unless it divides the model): cut once for every PCP group.
  if (tp_size != 1) return of(model::shard_tp_group(weights, tp_size), weights.config);
  Weights out{.config = weights.config};
  out.whole = std::make_unique<model::DenseModel>(std::move(weights));
  return out;
}

PcpCpuModelRunner::Weights PcpCpuModelRunner::Weights::of(std::vector<model::TpShard>&& shards,
                                                          const model::ModelConfig& full_config) {
  Weights out{.config = full_config};
  for (model::TpShard& shard : shards) out.shards.push_back(std::make_shared<const model::TpShard>(std::move(shard)));
  return out;
}

PcpCpuModelRunner::PcpCpuModelRunner(model::ModelWeights weights, int pcp_size, int32_t num_blocks,
                                     int32_t block_size, int tp_size, model::DcpOptions dcp, bool fp8_kv_cache)
    : PcpCpuModelRunner(Weights::of(std::move(weights), tp_size), pcp_size, num_blocks, block_size, dcp,
                        fp8_kv_cache) {}

PcpCpuModelRunner::PcpCpuModelRunner(std::vector<model::TpShard> shards, const model::ModelConfig& full_config,
                                     int pcp_size, int32_t num_blocks, int32_t block_size, model::DcpOptions dcp,
                                     bool fp8_kv_cache)
    : PcpCpuModelRunner(Weights::of(std::move(shards), full_config), pcp_size, num_blocks, block_size, dcp,
                        fp8_kv_cache) {}

PcpCpuModelRunner::PcpCpuModelRunner(Weights weights, int pcp_size, int32_t num_blocks, int32_t block_size,
                                     model::DcpOptions dcp, bool fp8_kv_cache)
    : config_(weights.config),
      dcp_(dcp),
      whole_(std::move(weights.whole)),
      groups_((model::check_tp_size(config_, weights.tp_size()),
               dist::ParallelConfig{.tp = weights.tp_size(), .pcp = pcp_size, .dcp = dcp.size})),
      workers_(pcp_size * weights.tp_size(), [this](const std::string& reason) { groups_.abort(reason); }) {
  const std::vector<std::shared_ptr<const model::TpShard>>& shards = weights.shards;
  const int tp_size = weights.tp_size();
  TACHYON_CHECK(pcp_size >= 2) << "PcpCpuModelRunner needs a prefill context parallel size >= 2, got " << pcp_size;
  TACHYON_CHECK(dcp.interleave >= 1 && block_size % (dcp.size * dcp.interleave) == 0)
      << "decode context parallel size " << dcp.size << " x interleave " << dcp.interleave
      << " must divide the block size " << block_size;
  for (size_t t = 0; t < shards.size(); ++t) {
    const model::TpShard& shard = *shards[t];
    TACHYON_CHECK(shard.tp_rank == static_cast<int>(t) && shard.tp_size == tp_size)
        << "internal: shard " << t << " was cut for rank " << shard.tp_rank << " of " << shard.tp_size;
  }
  for (int r = 0; r < pcp_size * tp_size; ++r) {  // global rank r = pcp_rank * tp + tp_rank (dist::RankLayout)
    std::shared_ptr<const model::TpShard> shard = shards.empty() ? nullptr : shards[static_cast<size_t>(r % tp_size)];
    ranks_.push_back(std::make_unique<Rank>(groups_.make(r), std::move(shard), config_, num_blocks,
                                            block_size / dcp.size, fp8_kv_cache));
  }
  std::vector<std::unique_ptr<KvRowAccess>> tp_groups;  // each holds every token
  for (int p = 0; p < pcp_size; ++p) {
    std::vector<PagedKvCache*> caches;
    for (int t = 0; t < tp_size; ++t) caches.push_back(&ranks_[static_cast<size_t>(p * tp_size + t)]->cache);
    tp_groups.push_back(make_tp_kv_rows(caches, config_, dcp));
  }
  kv_rows_ = std::make_unique<ReplicatedKvRowAccess>(std::move(tp_groups));
}

PcpCpuModelRunner::~PcpCpuModelRunner() = default;

core::StepOutput PcpCpuModelRunner::run(const core::StepPlan& plan) {
  if (plan.empty()) return {};
  workers_.run([&](int rank) {
    Rank& me = *ranks_[static_cast<size_t>(rank)];
    me.pcp.reset();
    me.tp.reset();
    // The PCP group of TP rank 0 (global rank 0's) gathers the hidden states: a TP group's ranks
    // hold the same residual stream of their rows.
    std::vector<float>* hidden = plan.return_hidden_states && rank % tp_size() == 0 ? &me.hidden : nullptr;
    if (!me.shard) {
      me.logits = run_pcp_rank_step(*whole_, me.cache, plan, me.pcp, hidden);
      return;
    }
    const PcpRankForward forward = [&](const model::ForwardBatch& batch, model::AttentionBackend& attention,
                                       const model::ForwardHook& hook) {
      return me.shard->forward(batch, attention, hook);
    };
    const PcpDcp dcp{.group = dcp_.size > 1 ? me.groups.dcp.get() : nullptr, .interleave = dcp_.interleave};
    me.logits = run_pcp_rank_step(me.shard->config(), forward, me.cache, plan, me.pcp, dcp, hidden);
  });
  core::StepOutput output = sample_plan_rows(plan, ranks_[0]->logits, vocab_size());
  if (plan.return_hidden_states) output.hidden_states = std::move(ranks_[0]->hidden);
  return output;
}

}  // namespace tachyon::runner
