// What the in-process benchmarks (bench latency, bench throughput) share: an engine on the
// requested device for random prompts, and the prompts themselves.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tachyon/engine/engine_core.h"
#include "tachyon/model/model_config.h"

namespace tachyon::cli {

struct BenchEngine {
  core::EngineConfig config;  // as resolved at load (device kind, GPU name, KV blocks)
  model::ModelConfig model_config;
  const runner::ModelRunner* runner = nullptr;  // owned by `engine`
  std::unique_ptr<engine::EngineCore> engine;
};

// An engine stepped on the calling thread (no engine thread), without prefix caching: random
// prompts share nothing, and a hit would flatter the numbers.
BenchEngine make_bench_engine(const std::string& model_dir, const core::DeviceConfig& device, int64_t max_num_seqs,
                              int64_t max_model_len, int64_t max_num_batched_tokens);

// `length` token ids uniform in [0, vocab).
std::vector<int32_t> random_prompt(std::mt19937_64& gen, int64_t length, int64_t vocab);

// Greedy, exactly `output_len` tokens (EOS ignored).
core::SamplingParams fixed_length_params(int32_t output_len);

}  // namespace tachyon::cli
