// tachyon bench throughput: N random prompts submitted at once to an in-process engine, run to
// completion; requests and tokens per second as vLLM's `bench throughput` reports them (same
// JSON keys), with the device and the command recorded. Offline throughput: no HTTP, no
// tokenizer, the scheduler's continuous batching decides the batch.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "tachyon/cli/bench_engine.h"
#include "tachyon/cli/commands.h"

namespace tachyon::cli {
namespace {

struct ThroughputOptions {
  std::string model_dir;
  int32_t num_prompts = 1000;
  int32_t input_len = 1024;
  int32_t output_len = 128;
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 8192;
  uint64_t seed = 0;
  std::string output_json;
  std::string command_line;
  core::DeviceConfig device;
  core::SpeculativeConfig speculative;
};

void run_throughput(const ThroughputOptions& options) {
  BenchEngine bench = make_bench_engine(options.model_dir, options.device, options.speculative, options.max_num_seqs,
                                        options.input_len + options.output_len, options.max_num_batched_tokens);
  // Blocks for every sequence at once would be the best case; the KV cache may hold fewer, in
  // which case the scheduler queues the rest, as a server would.
  std::mt19937_64 gen(options.seed);
  const core::SamplingParams params = fixed_length_params(options.output_len);
  int64_t output_tokens = 0;
  std::vector<std::shared_ptr<engine::OutputChannel>> channels;
  const auto begin = std::chrono::steady_clock::now();
  for (int32_t i = 0; i < options.num_prompts; ++i) {
    channels.push_back(std::make_shared<engine::OutputChannel>([&](engine::RequestOutput&& out) {
      for (const auto& delta : out.completions) output_tokens += static_cast<int64_t>(delta.token_ids.size());
    }));
    bench.engine->submit(random_prompt(gen, options.input_len, bench.model_config.vocab_size), params, channels.back());
  }
  while (bench.engine->step()) {
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  TACHYON_CHECK(output_tokens == int64_t{options.num_prompts} * options.output_len)
      << "internal: " << output_tokens << " tokens generated, expected " << int64_t{options.num_prompts} * options.output_len;
  const int64_t total_tokens = output_tokens + int64_t{options.num_prompts} * options.input_len;
  const nlohmann::ordered_json speculative =
      speculative_summary(bench.config.speculative, engine::EngineStats{}, bench.engine->stats());
  nlohmann::ordered_json result = {
      {"command", options.command_line},
      {"model", options.model_dir},
      {"device", bench.config.device.kind},
      {"gpu", bench.config.device.gpu_name},
      {"num_prompts", options.num_prompts},
      {"input_len", options.input_len},
      {"output_len", options.output_len},
      {"max_num_seqs", options.max_num_seqs},
      {"kv_blocks", bench.config.num_blocks},
      {"startup_s", bench.startup_s},
      {"elapsed_time", seconds},
      {"num_requests", options.num_prompts},
      {"total_num_tokens", total_tokens},
      {"requests_per_second", options.num_prompts / seconds},
      {"tokens_per_second", static_cast<double>(total_tokens) / seconds},
      {"output_tokens_per_second", static_cast<double>(output_tokens) / seconds},
  };
  std::printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n", options.num_prompts / seconds,
              static_cast<double>(total_tokens) / seconds, static_cast<double>(output_tokens) / seconds);
  std::fputs(speculative_line(speculative).c_str(), stdout);
  if (!speculative.is_null()) result["speculative"] = speculative;
  if (!options.output_json.empty()) {
    std::ofstream out(options.output_json);
    TACHYON_CHECK(out.good()) << "cannot write " << options.output_json;
    out << result.dump(2) << "\n";
  }
}

}  // namespace

void add_bench_throughput_command(CLI::App& bench, const std::string& command_line) {
  auto options = std::make_shared<ThroughputOptions>();
  options->command_line = command_line;
  CLI::App* cmd = bench.add_subcommand("throughput", "offline throughput of N random prompts in-process");
  cmd->add_option("model", options->model_dir, "HF model directory")->required();
  cmd->add_option("--num-prompts", options->num_prompts, "prompts submitted at once")->default_val(1000)->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--input-len", options->input_len, "prompt tokens (random ids)")->default_val(1024)->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--output-len", options->output_len, "generated tokens per prompt")->default_val(128)->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-num-seqs", options->max_num_seqs, "sequences per step")->default_val(256)->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--max-num-batched-tokens", options->max_num_batched_tokens, "tokens per step")->default_val(8192);
  cmd->add_option("--seed", options->seed, "prompt generator seed")->default_val(0);
  cmd->add_option("--output-json", options->output_json, "write the result here too");
  add_device_options(*cmd, options->device);
  add_speculative_options(*cmd, options->speculative);
  cmd->callback([options] { run_throughput(*options); });
}

}  // namespace tachyon::cli
