#include "tachyon/cli/bench_engine.h"

#include "tachyon/app/runner_factory.h"

namespace tachyon::cli {

BenchEngine make_bench_engine(const std::string& model_dir, const core::DeviceConfig& device, int64_t max_num_seqs,
                              int64_t max_model_len, int64_t max_num_batched_tokens) {
  BenchEngine bench;
  bench.config.device = device;
  bench.config.scheduler.max_num_seqs = max_num_seqs;
  bench.config.scheduler.max_model_len = max_model_len;
  bench.config.scheduler.max_num_batched_tokens = std::max(max_num_batched_tokens, max_num_seqs);
  bench.config.enable_prefix_caching = false;
  app::LoadedRunner loaded = app::load_runner(model_dir, bench.config);
  bench.model_config = loaded.model_config;
  bench.runner = loaded.runner.get();
  bench.engine = std::make_unique<engine::EngineCore>(bench.config, std::move(loaded.runner));
  return bench;
}

std::vector<int32_t> random_prompt(std::mt19937_64& gen, int64_t length, int64_t vocab) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(length));
  for (int32_t& t : prompt) t = token(gen);
  return prompt;
}

core::SamplingParams fixed_length_params(int32_t output_len) {
  core::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = output_len;
  params.ignore_eos = true;
  return params;
}

}  // namespace tachyon::cli
