// The device flags every command that runs a model shares, registered in one place.
#include "tachyon/cli/commands.h"

namespace tachyon::cli {

void add_device_options(CLI::App& cmd, engine::DeviceConfig& device) {
  cmd.add_option("--device", device.kind, "cpu, cuda, or auto (cuda when a GPU is present and serves the model)")
      ->default_val("auto")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd.add_option("--gpu-memory-utilization", device.gpu_memory_utilization,
                 "share of GPU memory for weights, activations and the KV cache")
      ->default_val(0.9)
      ->check(CLI::Range(0.05, 0.99));
  cmd.add_option("--tp", device.tensor_parallel_size,
                 "tensor parallel size: ranks the model's heads, MLP and vocab are split over (CPU thread ranks "
                 "only in this build)")
      ->default_val(1)
      ->check(CLI::Range(1, 64));
  cmd.add_flag("--enforce-eager", device.enforce_eager, "no CUDA graphs for decode steps");
}

}  // namespace tachyon::cli
