// What the in-process benchmarks (bench latency, bench throughput) share: an engine on the
// requested device for random prompts, and the prompts themselves.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tachyon/engine/engine_core.h"
#include "tachyon/model/model_config.h"

namespace tachyon::cli {

struct BenchEngine {
  core::EngineConfig config;  // as resolved at load (device kind, GPU name, KV blocks)
  model::ModelConfig model_config;
  const runner::ModelRunner* runner = nullptr;  // owned by `engine`
  std::unique_ptr<engine::EngineCore> engine;
  // Wall seconds from the start of the load to a ready engine: reading and converting the
  // weights, uploading them, the KV cache and (on the GPU) the CUDA graphs' capture.
  double startup_s = 0;
};

// An engine stepped on the calling thread (no engine thread), without prefix caching: random
// prompts share nothing, and a hit would flatter the numbers. `speculative`: its drafter, if any.
BenchEngine make_bench_engine(const std::string& model_dir, const core::DeviceConfig& device,
                              const core::SpeculativeConfig& speculative, int64_t max_num_seqs, int64_t max_model_len,
                              int64_t max_num_batched_tokens);

// Speculative decoding between two stats snapshots, as vLLM's spec-decode metrics report it:
// drafts, draft and accepted tokens, acceptance rate (accepted / draft tokens), mean acceptance
// length (tokens per drafted step: 1 + accepted / drafts) and the acceptance rate of each
// position. Null when speculation is off.
nlohmann::ordered_json speculative_summary(const core::SpeculativeConfig& speculative, const engine::EngineStats& before,
                                           const engine::EngineStats& after);
// The summary's one line for stderr ("" when speculation is off).
std::string speculative_line(const nlohmann::ordered_json& summary);

// `length` token ids uniform in [0, vocab).
std::vector<int32_t> random_prompt(std::mt19937_64& gen, int64_t length, int64_t vocab);

// Greedy, exactly `output_len` tokens (EOS ignored).
core::SamplingParams fixed_length_params(int32_t output_len);

}  // namespace tachyon::cli
