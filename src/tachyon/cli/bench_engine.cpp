#include "tachyon/cli/bench_engine.h"

#include <chrono>
#include <cstdio>

#include "tachyon/app/runner_factory.h"

namespace tachyon::cli {

BenchEngine make_bench_engine(const std::string& model_dir, const core::DeviceConfig& device,
                              const core::SpeculativeConfig& speculative, int64_t max_num_seqs, int64_t max_model_len,
                              int64_t max_num_batched_tokens) {
  const auto start = std::chrono::steady_clock::now();
  BenchEngine bench;
  bench.config.device = device;
  bench.config.speculative = speculative;
  bench.config.scheduler.max_num_seqs = max_num_seqs;
  bench.config.scheduler.max_model_len = max_model_len;
  bench.config.scheduler.max_num_batched_tokens = std::max(max_num_batched_tokens, max_num_seqs);
  bench.config.enable_prefix_caching = false;
  app::LoadedRunner loaded = app::load_runner(model_dir, bench.config);
  bench.model_config = loaded.model_config;
  bench.runner = loaded.runner.get();
  bench.engine = std::make_unique<engine::EngineCore>(bench.config, std::move(loaded.runner), std::move(loaded.drafter));
  bench.startup_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return bench;
}

std::vector<int32_t> random_prompt(std::mt19937_64& gen, int64_t length, int64_t vocab) {
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> prompt(static_cast<size_t>(length));
  for (int32_t& t : prompt) t = token(gen);
  return prompt;
}

nlohmann::ordered_json speculative_summary(const core::SpeculativeConfig& speculative, const engine::EngineStats& before,
                                           const engine::EngineStats& after) {
  if (!speculative.enabled()) return nullptr;
  const int64_t drafts = after.num_drafts - before.num_drafts;
  const int64_t drafted = after.draft_tokens - before.draft_tokens;
  const int64_t accepted = after.draft_tokens_accepted - before.draft_tokens_accepted;
  nlohmann::ordered_json per_position = nlohmann::json::array();
  for (int32_t i = 0; i < speculative.num_speculative_tokens; ++i) {
    const auto at = static_cast<size_t>(i);
    const int64_t n = after.draft_tokens_accepted_per_position[at] - before.draft_tokens_accepted_per_position[at];
    per_position.push_back(drafts > 0 ? static_cast<double>(n) / static_cast<double>(drafts) : 0.0);
  }
  nlohmann::ordered_json summary = {
      {"method", speculative.method},
      {"num_speculative_tokens", speculative.num_speculative_tokens},
  };
  if (speculative.method == "ngram") {
    summary["ngram_min"] = speculative.ngram_min;
    summary["ngram_max"] = speculative.ngram_max;
  }
  if (!speculative.draft_model.empty()) summary["draft_model"] = speculative.draft_model;
  // Forced acceptance is a benchmark mode: the figure says so beside the rates it produced.
  if (speculative.forced_acceptance >= 0.0f) summary["forced_acceptance"] = speculative.forced_acceptance;
  summary.update(nlohmann::ordered_json{
      {"num_drafts", drafts},
      {"draft_tokens", drafted},
      {"accepted_tokens", accepted},
      {"acceptance_rate", drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0},
      {"mean_acceptance_length", drafts > 0 ? 1.0 + static_cast<double>(accepted) / static_cast<double>(drafts) : 1.0},
      {"acceptance_rate_per_position", per_position},
  });
  return summary;
}

std::string speculative_line(const nlohmann::ordered_json& summary) {
  if (summary.is_null()) return "";
  char line[256];
  std::snprintf(line, sizeof(line),
                "Speculative decoding (%s, k=%d%s): %lld of %lld draft tokens accepted (acceptance rate %.1f%%), mean "
                "acceptance length %.2f over %lld drafts\n",
                summary["method"].get<std::string>().c_str(), summary["num_speculative_tokens"].get<int>(),
                summary.contains("forced_acceptance") ? ", forced acceptance" : "",
                static_cast<long long>(summary["accepted_tokens"].get<int64_t>()),
                static_cast<long long>(summary["draft_tokens"].get<int64_t>()),
                100.0 * summary["acceptance_rate"].get<double>(), summary["mean_acceptance_length"].get<double>(),
                static_cast<long long>(summary["num_drafts"].get<int64_t>()));
  return line;
}

core::SamplingParams fixed_length_params(int32_t output_len) {
  core::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = output_len;
  params.ignore_eos = true;
  return params;
}

}  // namespace tachyon::cli
