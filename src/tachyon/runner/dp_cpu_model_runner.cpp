#include "tachyon/runner/dp_cpu_model_runner.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "tachyon/base/check.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/plan_sampling.h"
#include "tachyon/runner/tp_kv_rows.h"

namespace tachyon::runner {

namespace {

// `shard`, checked to be the one cut for the rank `groups` place it at (dp_shard_places).
model::TpShard placed(model::TpShard shard, const dist::ProcessGroups& groups) {
  TACHYON_CHECK(shard.tp_rank == groups.tp->rank() && shard.tp_size == groups.tp->size() && shard.expert_parallel &&
                shard.expert_begin == groups.ep->rank() * shard.expert_count)
      << "internal: the shard of TP rank " << shard.tp_rank << " of " << shard.tp_size << " (experts from "
      << shard.expert_begin << ") at TP rank " << groups.tp->rank() << " of " << groups.tp->size()
      << ", expert-parallel rank " << groups.ep->rank() << " of " << groups.ep->size();
  return shard;
}

}  // namespace

DpCpuModelRunner::Rank::Rank(dist::ProcessGroups process_groups, model::TpShard shard, int32_t num_blocks,
                             int32_t block_size, bool fp8_kv_cache)
    : groups(std::move(process_groups)),
      model(placed(std::move(shard), groups), *groups.tp, groups.ep.get()),
      cache(model.config(), num_blocks, block_size, model::MlaAttentionForm::kAbsorbed, fp8_kv_cache) {}

std::vector<model::ShardPlace> dp_shard_places(int dp_size, int tp_size) {
  std::vector<model::ShardPlace> places;
  for (int g = 0; g < dp_size * tp_size; ++g) {
    places.push_back({.tp_rank = g % tp_size, .tp_size = tp_size, .ep_rank = g, .ep_size = dp_size * tp_size});
  }
  return places;
}

namespace {

std::vector<model::TpShard> shard_all(const model::ModelWeights& full, int dp_size, int tp_size) {
  model::check_dp_size(full.config, dp_size, tp_size);  // before cutting
  std::vector<model::TpShard> shards;
  for (const model::ShardPlace& p : dp_shard_places(dp_size, tp_size)) {
    shards.push_back(model::shard_weights(full, p.tp_rank, p.tp_size, p.ep_rank, p.ep_size));
  }
  return shards;
}

}  // namespace

DpCpuModelRunner::DpCpuModelRunner(const model::ModelWeights& full, int dp_size, int tp_size, int32_t num_blocks,
                                   int32_t block_size, bool fp8_kv_cache)
    : DpCpuModelRunner(shard_all(full, dp_size, tp_size), full.config, dp_size, tp_size, num_blocks, block_size,
                       fp8_kv_cache) {}

DpCpuModelRunner::DpCpuModelRunner(std::vector<model::TpShard> shards, const model::ModelConfig& config, int dp_size,
                                   int tp_size, int32_t num_blocks, int32_t block_size, bool fp8_kv_cache)
    : vocab_size_(config.vocab_size),
      tp_size_(tp_size),
      process_groups_((model::check_dp_size(config, dp_size, tp_size),
                       dist::ParallelConfig{.dp = dp_size, .tp = tp_size, .ep = dp_size * tp_size})),
      placement_(dp_size, num_blocks),
      workers_(dp_size * tp_size, [this](const std::string& reason) { process_groups_.abort(reason); }) {
  TACHYON_CHECK(dp_size >= 2) << "DpCpuModelRunner needs dp_size >= 2, got " << dp_size;
  TACHYON_CHECK(shards.size() == static_cast<size_t>(dp_size * tp_size))
      << "internal: " << shards.size() << " shards for " << dp_size << " x " << tp_size << " ranks";
  for (int g = 0; g < dp_size * tp_size; ++g) {
    ranks_.push_back(std::make_unique<Rank>(process_groups_.make(g), std::move(shards[static_cast<size_t>(g)]),
                                            num_blocks, block_size, fp8_kv_cache));
  }
  std::vector<std::unique_ptr<KvRowAccess>> replicas;
  for (int d = 0; d < dp_size; ++d) {
    std::vector<PagedKvCache*> caches;
    for (int t = 0; t < tp_size; ++t) caches.push_back(&ranks_[static_cast<size_t>(d * tp_size + t)]->cache);
    replicas.push_back(make_tp_kv_rows(caches, config));
  }
  kv_rows_ = std::make_unique<PooledKvRowAccess>(std::move(replicas), num_blocks);
}

// The placement record on stderr at shutdown, beside the CLI's other reports: how the server
// spread its sequences (tests/server/run_dp.sh reads it).
DpCpuModelRunner::~DpCpuModelRunner() {
  std::string counts;
  for (int64_t placed : placement_.placed()) counts += " " + std::to_string(placed);
  std::fprintf(stderr, "[tachyon] data-parallel attention: sequences started per replica:%s\n", counts.c_str());
  std::string imported;
  for (int64_t tokens : kv_rows_->scattered_tokens()) imported += " " + std::to_string(tokens);
  if (imported.find_first_not_of(" 0") != std::string::npos) {
    std::fprintf(stderr, "[tachyon] data-parallel attention: imported prompt tokens per replica:%s\n", imported.c_str());
  }
}

core::StepOutput DpCpuModelRunner::run(const core::StepPlan& plan) {
  if (plan.empty()) return {};
  const DpStep step = split_plan(plan, placement_);
  workers_.run([&](int rank) {
    Rank& me = *ranks_[static_cast<size_t>(rank)];
    const core::StepPlan& mine = step.plans[static_cast<size_t>(rank / tp_size_)];
    me.hidden.clear();
    if (mine.empty()) {  // nothing of this replica's runs: serve the others' tokens to our experts
      me.model.idle_forward();
      me.logits.clear();
      return;
    }
    const model::ForwardHook hook =
        plan.return_hidden_states && rank % tp_size_ == 0 ? model::keep_final_hidden(me.hidden) : nullptr;
    PagedAttentionBackend attention(me.model.config(), me.cache, mine);
    me.logits =
        me.model.forward(model::ForwardBatch{mine.token_ids, mine.positions, mine.logits_rows}, attention, hook);
  });
  // The replicas' logits rows (each replica's TP rank 0 holds them), back in the step's order.
  std::vector<float> logits(step.rows.size() * static_cast<size_t>(vocab_size_));  // [rows, vocab]
  for (size_t i = 0; i < step.rows.size(); ++i) {
    const auto [replica, row] = step.rows[i];
    const std::vector<float>& from = ranks_[static_cast<size_t>(replica * tp_size_)]->logits;
    std::copy_n(from.begin() + row * vocab_size_, vocab_size_, logits.begin() + static_cast<int64_t>(i) * vocab_size_);
  }
  core::StepOutput output = sample_plan_rows(plan, logits, vocab_size_);
  if (plan.return_hidden_states) output.hidden_states = gather_hidden_states(step);
  return output;
}

// [step tokens, hidden]: each token's row from its replica's TP rank 0, in the step's order.
std::vector<float> DpCpuModelRunner::gather_hidden_states(const DpStep& step) const {
  const auto h = static_cast<size_t>(ranks_.front()->model.config().hidden_size);
  std::vector<float> hidden(step.tokens.size() * h);
  for (size_t t = 0; t < step.tokens.size(); ++t) {
    const auto [replica, local] = step.tokens[t];
    const std::vector<float>& from = ranks_[static_cast<size_t>(replica * tp_size_)]->hidden;
    TACHYON_CHECK(from.size() >= (static_cast<size_t>(local) + 1) * h)
        << "internal: replica " << replica << " returned " << from.size() / h << " hidden states, token " << local
        << " asked";
    std::copy_n(from.begin() + static_cast<int64_t>(local) * static_cast<int64_t>(h), h,
                hidden.begin() + static_cast<int64_t>(t * h));
  }
  return hidden;
}

}  // namespace tachyon::runner
