// The device flags every command that runs a model shares, registered in one place.
#include <map>

#include "tachyon/cli/commands.h"

namespace tachyon::cli {

void add_device_options(CLI::App& cmd, core::DeviceConfig& device) {
  cmd.add_option("--device", device.kind, "cpu, cuda, or auto (cuda when a GPU is present and serves the model)")
      ->default_val("auto")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd.add_option("--gpu-memory-utilization", device.gpu_memory_utilization,
                 "share of GPU memory for weights, activations and the KV cache")
      ->default_val(0.9)
      ->check(CLI::Range(0.05, 0.99));
  cmd.add_option("--kv-cache-memory-bytes", device.kv_cache_memory_bytes,
                 "bytes of GPU memory for the KV cache, instead of what --gpu-memory-utilization leaves (several "
                 "servers on one GPU: each takes its own size, not a share of what the others left)")
      ->default_val(0)
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
  cmd.add_option("--tp", device.tensor_parallel_size,
                 "tensor parallel size: ranks the model's heads, MLP and vocab are split over (one GPU each, or "
                 "CPU thread ranks with --device cpu)")
      ->default_val(1)
      ->check(CLI::Range(1, 64));
  cmd.add_flag("--enable-expert-parallel", device.enable_expert_parallel,
               "hold each MoE expert whole on one of the --tp ranks (E / tp each) instead of splitting every "
               "expert over them; attention stays tensor-parallel (CPU thread ranks only for now)");
  cmd.add_option("--data-parallel-size,--dp", device.data_parallel_size,
                 "data-parallel attention: replicas of the attention, each with its own sequences (placed "
                 "round-robin) and KV cache, the MoE experts spread over the --dp x --tp ranks (MoE models, CPU "
                 "thread ranks only for now)")
      ->default_val(1)
      ->check(CLI::Range(1, 64));
  cmd.add_option("--decode-context-parallel-size,--dcp", device.decode_context_parallel_size,
                 "decode context parallel size: the latent KV cache split by token over this many ranks of each --tp "
                 "group (must divide --tp; MLA models on CPU thread ranks), each holding 1/N of the tokens")
      ->default_val(1)
      ->check(CLI::Range(1, 64));
  cmd.add_option("--prefill-context-parallel-size,--pcp", device.prefill_context_parallel_size,
                 "prefill context parallel size: each prefill chunk's rows split over this many whole-model ranks, "
                 "attention over the gathered context, decodes replicated (CPU thread ranks, --tp 1)")
      ->default_val(1)
      ->check(CLI::Range(1, 64));
  cmd.add_option("--dcp-kv-cache-interleave-size", device.dcp_kv_cache_interleave_size,
                 "consecutive tokens a --dcp rank holds before the next rank's (must divide --block-size / --dcp)")
      ->default_val(1)
      ->check(CLI::Range(1, 1024));
  cmd.add_flag("--enable-two-batch-overlap,--tbo", device.enable_two_batch_overlap,
               "run a step of two or more sequences as two micro-batches, one's expert dispatch and combine "
               "overlapping the other's compute (MoE models with --enable-expert-parallel, CPU thread ranks)");
  cmd.add_option("--nnodes", device.nnodes, "nodes the --tp ranks span (--tp / --nnodes GPUs on each)")
      ->default_val(1)
      ->check(CLI::Range(1, 64));
  cmd.add_option("--node-rank", device.node_rank, "this node's index; node 0 serves, the others follow it")
      ->default_val(0)
      ->check(CLI::Range(0, 63));
  cmd.add_option("--master-addr", device.master_addr, "address of node 0 (NCCL's bootstrap root listens there)")
      ->default_val("127.0.0.1");
  cmd.add_option("--master-port", device.master_port, "port of NCCL's bootstrap root on node 0")
      ->default_val(29500)
      ->check(CLI::Range(1, 65535));
  cmd.add_flag("--enforce-eager", device.enforce_eager, "no CUDA graphs for decode steps");
  cmd.add_option("--quantization", device.quantization,
                 "quantize the weights at load time: fp8 (E4M3 with one scale per 128x128 block)")
      ->check(CLI::IsMember({"fp8"}));
  cmd.add_option("--kv-cache-dtype", device.kv_cache_dtype,
                 "what the KV cache stores: auto (the model's bf16), bf16, or fp8 (E4M3 with a scale per token and "
                 "head; latent attention: per 128 values of a token)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, DType>{
          {"auto", DType::kBF16}, {"bf16", DType::kBF16}, {"fp8", DType::kF8E4M3}}))
      ->default_val("auto")
      ->option_text("auto|bf16|fp8");
  cmd.add_option("--async-scheduling", device.async_scheduling,
                 "plan step n+1 while step n runs: auto (where the device gains from it: one GPU, no "
                 "speculative decoding), on, off")
      ->transform(CLI::CheckedTransformer(std::map<std::string, core::AsyncScheduling>{
          {"auto", core::AsyncScheduling::kAuto}, {"on", core::AsyncScheduling::kOn}, {"off", core::AsyncScheduling::kOff}}))
      ->default_val("auto")  // after the transform, which turns the name into the value
      ->option_text("auto|on|off");
}

}  // namespace tachyon::cli
