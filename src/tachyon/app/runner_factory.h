// The one place that turns a model directory and an EngineConfig into a ModelRunner: resolves
// --device (auto: CUDA when this build has it, a GPU is present and the model's shapes are ones
// the CUDA kernels serve; else the CPU reference), loads the weights in the runner's dtype, and
// fills the start-up fields of the config (device.kind, gpu_name, model_identity, and
// num_blocks when the CUDA runner sizes the KV cache from free memory).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tachyon/core/engine_config.h"
#include "tachyon/engine/drafter.h"
#include "tachyon/model/model_config.h"
#include "tachyon/runner/model_runner.h"

namespace tachyon::app {

struct LoadedRunner {
  std::unique_ptr<runner::ModelRunner> runner;
  model::ModelConfig model_config;
  // The drafter config.speculative names when it needs a model of its own (--speculative-method
  // draft, on the runner's device; mtp, the served model's MTP modules, CPU only); null otherwise
  // (EngineCore builds an n-gram drafter itself).
  std::unique_ptr<engine::Drafter> drafter;
  // Every token's hidden state after the final norm for one token sequence, [tokens, hidden],
  // computed outside the step loop and the KV cache (what /v1/embeddings pools). Set by the
  // plain CPU runner only (--device cpu, no --tp / --dp / --pcp); empty where the runner gives none.
  std::function<std::vector<float>(std::span<const int32_t>)> final_hidden_states;
};

// config.device.kind: "cpu", "cuda" or "auto". Loads the draft model too when
// config.speculative asks for one. TACHYON_RUNNER_FAULT (tests only: engine/runner_fault.h)
// wraps the runner in one that fails at the step it names. Throws Error with a message the user can act
// on (no CUDA in this build, no GPU, unsupported head_dim on the GPU, out of memory).
LoadedRunner load_runner(const std::filesystem::path& model_dir, core::EngineConfig& config);

// "Qwen3ForCausalLM:<hash of config.json>": what a cached artifact of this model is keyed by.
std::string model_identity(const std::filesystem::path& model_dir, const model::ModelConfig& config);

// Node node_rank > 0 of a multi-node TP group (--nnodes): loads this node's ranks, joins the
// group and runs the leader's steps until the leader's engine stops. Start it with the same
// model and options as node 0 (checked at start-up through the plan hash).
void run_follower_node(const std::filesystem::path& model_dir, core::EngineConfig& config);

// Why the CUDA runner cannot serve this model ("" when it can).
std::string cuda_unsupported_reason(const model::ModelConfig& config);

}  // namespace tachyon::app
