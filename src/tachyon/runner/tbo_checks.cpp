// Two-batch overlap's start-up checks (see tbo_checks.h): the first failing one is the reason.
#include "tachyon/runner/tbo_checks.h"

#include <sstream>

namespace tachyon::runner {

std::string tbo_unsupported_reason(const core::EngineConfig& config, const model::ModelConfig& model) {
  const core::DeviceConfig& device = config.device;
  if (!device.enable_two_batch_overlap) return "";
  std::ostringstream why;
  why << "--enable-two-batch-overlap: ";
  if (!model.is_moe()) {
    why << model.architecture << " has no mixture-of-experts layer; two-batch overlap hides the expert dispatch and "
        << "combine of an expert-parallel MoE model and is not verified on dense models";
  } else if (device.kind == "cuda") {
    why << "runs on CPU thread ranks only (--device cpu): the GPU runners have no comm stream yet";
  } else if (!device.enable_expert_parallel || device.tensor_parallel_size < 2) {
    why << "needs expert parallelism (--tp N >= 2 --enable-expert-parallel): it overlaps one micro-batch's expert "
        << "dispatch and combine with the other's compute";
  } else if (device.data_parallel_size > 1) {
    why << "with --dp " << device.data_parallel_size << " is not verified by any test yet";
  } else if (device.decode_context_parallel_size > 1) {
    why << "with --dcp " << device.decode_context_parallel_size << " is not verified by any test yet";
  } else if (device.nnodes > 1) {
    why << "with --nnodes > 1 is not verified by any test yet";
  } else {
    return "";
  }
  return why.str();
}

}  // namespace tachyon::runner
