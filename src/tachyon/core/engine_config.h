// EngineConfig: the one typed tree of engine settings, validated at start-up and immutable
// afterwards. plan_hash() keys every cached artifact (tuned GEMM algorithms, and later captured
// graphs saved to disk): DESIGN.md rule 6, every field that changes a plan is in the hash, and
// tests/unit/test_engine_config.cpp flips each one and checks that the hash moves.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tachyon/core/scheduler_config.h"
#include "tachyon/core/speculative_config.h"
#include "tachyon/tensor/dtype.h"

namespace tachyon::core {

// Whether the engine plans step n+1 while step n runs (ModelRunner launch / wait with two steps
// in flight): auto turns it on where the runner gains from it (ModelRunner::overlaps_steps) and
// no drafter is set; on forces it (a drafter is then refused), off never.
enum class AsyncScheduling { kAuto, kOn, kOff };

// Where and how the model runs.
struct DeviceConfig {
  std::string kind = "auto";             // "cpu", "cuda", or "auto" (cuda when a GPU is present)
  double gpu_memory_utilization = 0.90;  // share of GPU memory for weights + workspace + KV cache
  // > 0: the KV cache takes exactly this many bytes instead of what gpu_memory_utilization leaves
  // (vLLM's kv_cache_memory_bytes). The runner factory gives a draft model its share this way.
  int64_t kv_cache_memory_bytes = 0;
  bool enforce_eager = false;            // no CUDA graphs (debugging, or to compare with graphs)
  AsyncScheduling async_scheduling = AsyncScheduling::kAuto;  // changes when steps run, not what they compute
  std::vector<int32_t> cuda_graph_batch_sizes;  // decode buckets; empty: 1, 2, 4, 8, 16, 24, 32, ... max_num_seqs
  DType dtype = DType::kBF16;           // weights and activations on the GPU
  DType kv_cache_dtype = DType::kBF16;  // what the KV cache stores
  std::string quantization;             // "" or "fp8": weights quantized at load time (model/online_fp8.h)
  int32_t tensor_parallel_size = 1;
  // MoE experts held whole, num_experts / tensor_parallel_size per rank, instead of each expert
  // split over the ranks (vLLM's --enable-expert-parallel); attention stays tensor-parallel.
  bool enable_expert_parallel = false;
  // Data-parallel attention (--data-parallel-size, --dp): replicas of the attention, each with its
  // own sequences and KV cache, the MoE layers expert-parallel over dp x tp ranks (MoE models on
  // CPU thread ranks; runner/dp_cpu_model_runner.h).
  int32_t data_parallel_size = 1;
  // Decode context parallelism (--decode-context-parallel-size, --dcp): the latent KV cache split
  // by token over this many consecutive ranks of each TP group (must divide tensor_parallel_size),
  // dealt out in runs of dcp_kv_cache_interleave_size tokens (model/dcp_layout.h).
  int32_t decode_context_parallel_size = 1;
  int32_t dcp_kv_cache_interleave_size = 1;
  // Prefill context parallelism (--prefill-context-parallel-size, --pcp): each prefill chunk's rows
  // split over this many whole-model ranks, one grouped gather per layer, decodes replicated
  // (CPU thread ranks; runner/pcp_cpu_model_runner.h, refusals in runner/pcp_checks.h).
  int32_t prefill_context_parallel_size = 1;
  // Two-batch overlap (--enable-two-batch-overlap, --tbo): a step of two or more sequences runs as
  // two micro-batches whose collectives overlap the other's compute (expert-parallel MoE models
  // on CPU thread ranks; runner/tbo_rank_step.h, refusals in runner/tbo_checks.h).
  bool enable_two_batch_overlap = false;
  // Tensor parallelism over several nodes (nnodes > 1): tensor_parallel_size / nnodes GPUs on each
  // node; node 0 runs the engine and its rank 0 listens at master_addr:master_port for NCCL's
  // bootstrap; the other nodes follow it (docs/parallelism.md). Not in plan_hash: a node's index
  // changes nothing it plans, and the nodes compare plan hashes to catch other options.
  int32_t nnodes = 1;
  int32_t node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int32_t master_port = 29500;
  // Filled at start-up by the runner factory, so cached artifacts never cross machines or models.
  std::string gpu_name;        // e.g. "NVIDIA H200 sm_90"
  std::string model_identity;  // architecture + hash of config.json
};

struct EngineConfig {
  SchedulerConfig scheduler;
  int32_t block_size = 16;
  int32_t num_blocks = 1024;  // KV cache blocks; the CUDA runner sizes it from free memory
  bool enable_prefix_caching = true;
  int64_t max_queued_requests = 4096;  // waiting requests beyond this are refused at submit
  DeviceConfig device;
  // Draft tokens (speculative decoding); off by default. k is in plan_hash (it sizes the CUDA
  // runner's logits rows); the drafter's kind is not (it changes no plan of the served model).
  SpeculativeConfig speculative;

  // 128-bit hash (hex) of every field that changes a captured graph, a tuned kernel choice or a
  // cached artifact. num_blocks, prefix caching, queue limits and async scheduling change none
  // and are left out.
  std::string plan_hash() const;
};

// The most decode rows one step carries: max_num_seqs, or with k draft tokens per sequence
// max_num_seqs * (1 + k) bounded by the step's tokens (max(max_num_batched_tokens, max_num_seqs)):
// a GPU verify step runs each of a sequence's 1 + k tokens as a decode row (runner/step_inputs.h).
int32_t max_decode_rows(const EngineConfig& config);

// The decode batch sizes (in rows) that get a CUDA graph: config.device.cuda_graph_batch_sizes
// when given (sorted, each in [1, max_decode_rows]), else 1, 2, 4, 8 (every count up to 8 when
// drafts are verified), then steps of 8 up to max_num_seqs, then (verify steps' extra rows)
// steps of 8 up to 256 rows and of 64 beyond, up to max_decode_rows.
std::vector<int32_t> cuda_graph_batch_sizes(const EngineConfig& config);

}  // namespace tachyon::core
