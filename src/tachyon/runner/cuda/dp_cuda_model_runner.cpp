#include "tachyon/runner/cuda/dp_cuda_model_runner.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "tachyon/base/check.h"
#include "tachyon/model/tp_shard.h"
#include "tachyon/runner/cuda/whole_model_ranks.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::runner {

std::string cuda_dp_unsupported_reason(const model::ModelConfig& model, const core::EngineConfig& config) {
  const core::DeviceConfig& device = config.device;
  const int dp = device.data_parallel_size;
  std::ostringstream why;
  try {
    model::check_dp_size(model, dp, 1);
  } catch (const Error& e) {
    return e.what();
  }
  const std::string gpu = model::cuda_tp_unsupported_reason(model, 1);
  if (!gpu.empty()) {
    why << gpu;
  } else if (device.tensor_parallel_size != 1 || device.decode_context_parallel_size != 1 ||
             device.prefill_context_parallel_size != 1 || device.nnodes != 1) {
    why << "--dp " << dp << " on GPUs runs whole-model ranks of one node: --tp, --dcp, --pcp and --nnodes must be 1";
  } else if (!device.enforce_eager) {
    why << "--dp " << dp << " on GPUs runs eagerly (--enforce-eager): the MoE layers' rows depend on the other "
        << "ranks' steps, which no captured graph holds";
  } else if (config.speculative.enabled()) {
    why << "--dp " << dp << " on GPUs with speculative decoding is not verified by any test";
  } else if (device.kv_cache_dtype != DType::kBF16) {
    why << "--dp " << dp << " on GPUs with --kv-cache-dtype fp8 is not verified by any test";
  } else if (device.enable_two_batch_overlap) {
    why << "--dp " << dp << " on GPUs with two-batch overlap is not built";
  }
  return why.str();
}

DpCudaModelRunner::DpCudaModelRunner(const model::Bf16ModelWeights& weights, const core::EngineConfig& config,
                                     TpCudaLayout layout, TpCommFactory make_comm, RankFailureHandler on_failure)
    : vocab_size_(weights.config.vocab_size),
      make_comm_(std::move(make_comm)),
      placement_(std::max(config.device.data_parallel_size, 1), 1),
      ranks_(layout.devices.size()),
      workers_(static_cast<int>(layout.devices.size()), std::move(on_failure)) {
  const int size = config.device.data_parallel_size;
  check_whole_model_layout(layout, config, size, "data-parallel attention");
  const std::string why = cuda_dp_unsupported_reason(weights.config, config);
  TACHYON_CHECK(why.empty()) << why;
  workers_.run([&](int r) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    rank.comm = join_rank_group(layout, make_comm_, r, size, "DP");
    // The whole model but the routed experts outside this rank's window (one TP rank of one).
    model::Bf16TpShard shard = model::shard_weights(weights, 0, 1, r, size);
    rank.runner = std::make_unique<CudaModelRunner>(shard.weights, config,
                                                    CudaTpRank{.expert_begin = static_cast<int32_t>(shard.expert_begin),
                                                               .expert_count = static_cast<int32_t>(shard.expert_count),
                                                               .ep_comm = rank.comm.get()});
  });
  int32_t blocks = ranks_[0].runner->num_blocks();
  for (const Rank& rank : ranks_) blocks = std::min(blocks, rank.runner->num_blocks());
  placement_ = DpPlacement(size, blocks);
}

// The placement record on stderr at shutdown, as the CPU ranks report it.
DpCudaModelRunner::~DpCudaModelRunner() {
  std::string counts;
  for (int64_t placed : placement_.placed()) counts += " " + std::to_string(placed);
  std::fprintf(stderr, "[tachyon] data-parallel attention: sequences started per replica:%s\n", counts.c_str());
  tear_down_ranks(workers_, ranks_);
}

core::StepOutput DpCudaModelRunner::run(const core::StepPlan& plan) {
  if (plan.empty()) return {};
  const DpStep step = split_plan(plan, placement_);
  // Every rank's forward rows, which every rank's MoE layers gather: known here, from the cut.
  std::vector<int32_t> rank_rows;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const core::StepPlan& mine = step.plans[r];
    rank_rows.push_back(mine.empty() ? 0 : ranks_[r].runner->forward_rows(mine));
  }
  workers_.run([&](int r) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    const core::StepPlan& mine = step.plans[static_cast<size_t>(r)];
    rank.output = {};
    if (mine.empty()) {  // nothing of this rank's runs: its experts serve the others' rows
      rank.runner->serve_experts(rank_rows);
      return;
    }
    rank.runner->launch_expert_group(mine, rank_rows);
    rank.output = rank.runner->wait();
  });
  last_rows_ = step.rows;
  // The sampled sequences in the step's order, each from the rank that ran it.
  std::vector<core::StepOutput*> outputs;
  for (Rank& rank : ranks_) outputs.push_back(&rank.output);
  return sampled_in_plan_order(plan, outputs, "DP");
}

std::vector<float> DpCudaModelRunner::last_logits(int32_t rows) const {
  TACHYON_CHECK(rows >= 0 && static_cast<size_t>(rows) <= last_rows_.size())
      << "last_logits(" << rows << "): the last step had " << last_rows_.size() << " logits rows";
  const size_t V = static_cast<size_t>(vocab_size_);
  std::vector<float> logits(static_cast<size_t>(rows) * V);
  std::vector<std::vector<float>> by_rank(ranks_.size());
  for (int32_t i = 0; i < rows; ++i) {
    const auto [rank, row] = last_rows_[static_cast<size_t>(i)];
    std::vector<float>& from = by_rank[static_cast<size_t>(rank)];
    if (from.empty()) {  // the rank's rows up to the last one asked of it
      int32_t needed = 0;
      for (int32_t j = 0; j < rows; ++j) {
        if (last_rows_[static_cast<size_t>(j)].first == rank) {
          needed = std::max(needed, static_cast<int32_t>(last_rows_[static_cast<size_t>(j)].second) + 1);
        }
      }
      from = ranks_[static_cast<size_t>(rank)].runner->last_logits(needed);
    }
    std::copy_n(from.begin() + row * static_cast<int64_t>(V), V, logits.begin() + static_cast<int64_t>(i) * V);
  }
  return logits;
}

double DpCudaModelRunner::last_step_device_ms() const {
  double slowest = 0.0;
  for (const Rank& rank : ranks_) slowest = std::max(slowest, rank.runner->last_step_device_ms());
  return slowest;
}

}  // namespace tachyon::runner
