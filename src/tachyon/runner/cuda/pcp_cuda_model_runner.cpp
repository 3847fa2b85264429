#include "tachyon/runner/cuda/pcp_cuda_model_runner.h"

#include <sstream>

#include "tachyon/base/check.h"
#include "tachyon/runner/cuda/whole_model_ranks.h"
#include "tachyon/runner/pcp_plan.h"
#include "tachyon/tensor/cuda/cuda_check.h"

namespace tachyon::runner {

std::string cuda_pcp_unsupported_reason(const model::ModelConfig& model, const core::EngineConfig& config) {
  const core::DeviceConfig& device = config.device;
  const int pcp = device.prefill_context_parallel_size;
  std::ostringstream why;
  if (!model.is_mla()) {
    why << "--pcp " << pcp << " on GPUs gathers latent attention's rows; " << model.architecture
        << " has no latent attention (dense attention's K/V gather is built on CPU thread ranks only)";
  } else if (device.tensor_parallel_size != 1 || device.decode_context_parallel_size != 1 ||
             device.data_parallel_size != 1 || device.nnodes != 1) {
    why << "--pcp " << pcp << " on GPUs runs whole-model ranks of one node: --tp, --dcp, --dp and --nnodes must be 1";
  } else if (!device.enforce_eager) {
    why << "--pcp " << pcp << " on GPUs runs eagerly (--enforce-eager): its decode graphs hold no gather";
  } else if (config.speculative.enabled()) {
    why << "--pcp " << pcp << " with speculative decoding is not verified by any test (verify rows are not split)";
  } else if (device.kv_cache_dtype != DType::kBF16) {
    why << "--pcp " << pcp << " with --kv-cache-dtype fp8 is not verified by any test";
  }
  return why.str();
}

PcpCudaModelRunner::PcpCudaModelRunner(const model::Bf16ModelWeights& weights, const core::EngineConfig& config,
                                       TpCudaLayout layout, TpCommFactory make_comm, RankFailureHandler on_failure)
    : vocab_size_(weights.config.vocab_size),
      make_comm_(std::move(make_comm)),
      ranks_(layout.devices.size()),
      workers_(static_cast<int>(layout.devices.size()), std::move(on_failure)) {
  const int size = config.device.prefill_context_parallel_size;
  check_whole_model_layout(layout, config, size, "prefill context parallelism");
  const std::string why = cuda_pcp_unsupported_reason(weights.config, config);
  TACHYON_CHECK(why.empty()) << why;
  workers_.run([&](int r) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    rank.comm = join_rank_group(layout, make_comm_, r, size, "PCP");
    rank.runner = std::make_unique<CudaModelRunner>(weights, config, CudaTpRank{.pcp_comm = rank.comm.get()});
  });
  num_blocks_ = ranks_[0].runner->num_blocks();
  for (const Rank& rank : ranks_) num_blocks_ = std::min(num_blocks_, rank.runner->num_blocks());
}

PcpCudaModelRunner::~PcpCudaModelRunner() {
  tear_down_ranks(workers_, ranks_);
}

core::StepOutput PcpCudaModelRunner::run(const core::StepPlan& plan) {
  if (plan.empty()) return {};
  const PcpPlan pcp = build_pcp_plan(plan, pcp_size());
  if (!pcp.split) {  // decodes (or too few rows to split): every rank runs the whole step on its own cache
    workers_.run([&](int r) {
      Rank& rank = ranks_[static_cast<size_t>(r)];
      rank.runner->launch(plan);
      rank.output = rank.runner->wait();
    });
    return std::move(ranks_[0].output);
  }
  std::vector<int64_t> positions, slots;
  for (int64_t t : pcp.gathered_tokens) {
    positions.push_back(plan.positions[static_cast<size_t>(t)]);
    slots.push_back(plan.slot_mapping[static_cast<size_t>(t)]);
  }
  std::vector<int32_t> rank_rows;
  for (const std::vector<int64_t>& tokens : pcp.rank_tokens) rank_rows.push_back(static_cast<int32_t>(tokens.size()));
  const SplitStepRows rows{positions, slots, rank_rows};
  workers_.run([&](int r) {
    Rank& rank = ranks_[static_cast<size_t>(r)];
    rank.runner->launch_split(pcp.local[static_cast<size_t>(r)], rows);
    rank.output = rank.runner->wait();
  });
  // The sampled sequences in plan order, each from the rank whose piece holds its logits row.
  std::vector<core::StepOutput*> outputs;
  for (Rank& rank : ranks_) outputs.push_back(&rank.output);
  return sampled_in_plan_order(plan, outputs, "PCP");
}

double PcpCudaModelRunner::last_step_device_ms() const { return ranks_[0].runner->last_step_device_ms(); }

}  // namespace tachyon::runner
