// Decode context parallelism's start-up checks (see dcp_checks.h): the first failing one is the reason.
#include "tachyon/runner/dcp_checks.h"

#include <sstream>

namespace tachyon::runner {

std::string dcp_unsupported_reason(const core::EngineConfig& config, const model::ModelConfig& model) {
  const core::DeviceConfig& device = config.device;
  const int dcp = device.decode_context_parallel_size, interleave = device.dcp_kv_cache_interleave_size;
  const int tp = device.tensor_parallel_size;
  std::ostringstream why;
  if (dcp < 1 || interleave < 1) {
    why << "--decode-context-parallel-size (" << dcp << ") and --dcp-kv-cache-interleave-size (" << interleave
        << ") must be at least 1";
  } else if (dcp == 1) {
    return "";
  } else if (device.kind == "cuda") {
    why << "--dcp " << dcp << " on --device cuda is verified only with tensor-parallel ranks sharing one GPU (a test "
        << "harness); across GPUs (NCCL) no test has run it yet: use --device cpu for now";
  } else if (device.data_parallel_size > 1) {
    why << "--dcp " << dcp << " with --dp " << device.data_parallel_size
        << " is not verified by any test yet (DCP splits the cache of one TP group's batch)";
  } else if (device.nnodes > 1) {
    why << "--dcp " << dcp << " with --nnodes > 1 is not verified by any test";
  } else if (tp % dcp != 0) {
    why << "--dcp " << dcp << " must divide --tp " << tp
        << ": decode context parallelism splits the cache among the ranks of a tensor-parallel group";
  } else if (!model.is_mla()) {
    why << "--dcp " << dcp << ": " << model.architecture << " has no latent attention; decode context "
        << "parallelism splits MLA's latent cache (DeepSeek-V3, V3.2, GLM-5) and is not verified on dense-attention "
        << "models (--tp already divides their cache by kv heads)";
  } else if (config.block_size % (dcp * interleave) != 0) {
    why << "--block-size " << config.block_size << " must be a multiple of --dcp " << dcp
        << " x --dcp-kv-cache-interleave-size " << interleave << " (every rank holds block_size / dcp tokens of "
        << "each block)";
  } else if (device.kv_cache_dtype != DType::kBF16) {
    why << "--dcp " << dcp << " with --kv-cache-dtype "
        << (device.kv_cache_dtype == DType::kF8E4M3 ? "fp8" : dtype_name(device.kv_cache_dtype))
        << " is not verified by any test yet";
  }
  return why.str();
}

}  // namespace tachyon::runner
