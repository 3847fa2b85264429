// Prefill context parallelism's start-up checks (see pcp_checks.h): the first failing one is the reason.
#include "tachyon/runner/pcp_checks.h"

#include <sstream>

namespace tachyon::runner {

std::string pcp_unsupported_reason(const core::EngineConfig& config, const model::ModelConfig& model) {
  const core::DeviceConfig& device = config.device;
  const int pcp = device.prefill_context_parallel_size, tp = device.tensor_parallel_size;
  const int dcp = device.decode_context_parallel_size;
  std::ostringstream why;
  const std::string flag = "--pcp " + std::to_string(pcp);
  if (pcp < 1) {
    why << "--prefill-context-parallel-size must be at least 1, got " << pcp;
  } else if (pcp == 1) {
    return "";
  } else if (pcp != 2 && pcp != 3 && pcp != 4 && pcp != 6 && pcp != 8) {
    why << flag << " is not verified by any test (group sizes 2, 3, 4, 6 and 8 are)";
  } else if (model.sliding_window.has_value() || (model.is_moe() && !model.is_mla())) {
    why << flag << ": " << model.architecture << " is not verified by any test yet (dense full-attention models "
        << "such as Llama and the latent-attention models DeepSeek-V3, V3.2 and GLM-5 are)";
  } else if (device.kind == "cuda") {
    why << flag << " on --device cuda is verified only with whole-model ranks sharing one GPU (a test harness; "
        << "runner/cuda/pcp_cuda_model_runner.h); across GPUs no test has run it yet: use --device cpu for now";
  } else if (tp > 1 && !model.is_mla()) {
    why << flag << " with --tp " << tp << " is verified on the latent-attention models only (DeepSeek-V3, V3.2, "
        << "GLM-5); " << model.architecture << " is not";
  } else if (tp > 1 && !((tp == 2 && (pcp == 2 || pcp == 3)) || (tp == 4 && pcp == 2))) {
    why << flag << " with --tp " << tp << " is not verified by any test yet (--tp 2 --pcp 2, --tp 2 --pcp 3 and "
        << "--tp 4 --pcp 2 are)";
  } else if (device.data_parallel_size > 1) {
    why << flag << " with --dp " << device.data_parallel_size << " is not verified by any test yet";
  } else if (dcp > 1 && !((tp == 2 || tp == 4) && dcp == 2 && pcp == 2)) {
    why << flag << " with --dcp " << dcp << " (--tp " << tp << ") is not verified by any test yet (--tp 2 or 4 with "
        << "--dcp 2 --pcp 2 is)";
  } else if (device.nnodes > 1) {
    why << flag << " with --nnodes > 1 is not verified by any test";
  } else if (device.enable_expert_parallel || device.enable_two_batch_overlap) {
    why << flag << " with --enable-expert-parallel or --tbo is not verified by any test yet";
  }
  return why.str();
}

}  // namespace tachyon::runner
