// tachyon bench latency: one batch of random prompts through the engine in-process, timed per
// step on the host (each step ends with the sampled tokens on the host, so a step's wall time is
// what a user waits). Reports the prefill time, the decode step (median of every decode step of
// every timed iteration) and the end-to-end latency, next to the memory-bound floor of a decode
// step (bytes of weights + KV read per step / measured device copy bandwidth). JSON as vLLM's
// `bench latency` writes it, plus our fields. Performance figures come from the GPU machine only.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>

#include "tachyon/model/decode_bytes.h"
#include "tachyon/model/fp8_served_experts.h"
#include "tachyon/cli/bench_engine.h"
#include "tachyon/cli/commands.h"
#ifdef TACHYON_HAVE_CUDA
#include "tachyon/tensor/cuda/device_buffer.h"
#endif

namespace tachyon::cli {
namespace {

struct LatencyOptions {
  std::string model_dir;
  int32_t batch_size = 1;
  int32_t input_len = 128;
  int32_t output_len = 256;
  int32_t num_iters = 5;
  int32_t num_iters_warmup = 2;
  int64_t max_num_batched_tokens = 8192;
  std::string output_json;
  std::string command_line;
  core::DeviceConfig device;
  core::SpeculativeConfig speculative;
};

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double latency_percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(values.size())))];
}

struct Iteration {
  double prefill_ms = 0;              // steps until every prompt has been computed
  std::vector<double> decode_ms;      // each pure decode step
  std::vector<double> decode_device_ms;  // the same steps' device time (0 on the CPU)
  std::vector<double> decode_idle_ms;    // the device's idle gap before each of them (0 on the CPU)
  double total_ms = 0;
  int64_t decode_tokens = 0;  // tokens the decode steps generated (1 + accepted drafts per sequence)
};

Iteration run_iteration(engine::EngineCore& engine, const runner::ModelRunner& runner, const LatencyOptions& options,
                        int64_t vocab, uint64_t seed) {
  std::mt19937_64 gen(seed);
  const core::SamplingParams params = fixed_length_params(options.output_len);
  std::vector<std::shared_ptr<engine::OutputChannel>> channels;
  for (int32_t b = 0; b < options.batch_size; ++b) {
    channels.push_back(std::make_shared<engine::OutputChannel>([](engine::RequestOutput&&) {}));
    engine.submit(random_prompt(gen, options.input_len, vocab), params, channels.back());
  }
  Iteration it;
  const int64_t prompt_tokens = int64_t{options.batch_size} * options.input_len;
  const int64_t computed_before = engine.stats().prompt_tokens_computed;
  const auto begin = std::chrono::steady_clock::now();
  auto last = begin;
  bool prefilled = false;
  int64_t generated = engine.stats().generated_tokens;
  while (engine.step()) {
    const auto now = std::chrono::steady_clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
    const int64_t generated_now = engine.stats().generated_tokens;
    if (prefilled) it.decode_tokens += generated_now - generated;
    generated = generated_now;
    if (prefilled) {
      it.decode_ms.push_back(ms);
      it.decode_device_ms.push_back(runner.last_step_device_ms());
      it.decode_idle_ms.push_back(runner.last_step_idle_ms());
    } else {
      it.prefill_ms += ms;
      prefilled = engine.stats().prompt_tokens_computed - computed_before >= prompt_tokens;
    }
  }
  it.total_ms = std::chrono::duration<double, std::milli>(last - begin).count();
  return it;
}

void run_latency(const LatencyOptions& options) {
  core::DeviceConfig device = options.device;
  // One graph for the batch's decode steps, and with k drafts one for its verify steps' rows
  // (batch x (1 + k), each token a decode row: runner/step_inputs.h).
  device.cuda_graph_batch_sizes = {options.batch_size};
  const int32_t k = options.speculative.enabled() ? options.speculative.num_speculative_tokens : 0;
  if (k > 0) device.cuda_graph_batch_sizes.push_back(options.batch_size * (1 + k));
  BenchEngine bench = make_bench_engine(options.model_dir, device, options.speculative, options.batch_size,
                                        options.input_len + options.output_len, options.max_num_batched_tokens);
  const core::EngineConfig& config = bench.config;
  const model::ModelConfig& model_config = bench.model_config;
  const runner::ModelRunner& runner = *bench.runner;
  engine::EngineCore& engine = *bench.engine;

  std::vector<Iteration> timed;
  engine::EngineStats before_timed = engine.stats();
  for (int32_t i = 0; i < options.num_iters_warmup + options.num_iters; ++i) {
    if (i == options.num_iters_warmup) before_timed = engine.stats();
    Iteration it = run_iteration(engine, runner, options, model_config.vocab_size, 1000 + static_cast<uint64_t>(i));
    if (i >= options.num_iters_warmup) timed.push_back(std::move(it));
  }
  const nlohmann::ordered_json speculative = speculative_summary(config.speculative, before_timed, engine.stats());
  std::vector<double> prefill, decode, decode_device, decode_idle, total;
  for (const Iteration& it : timed) {
    prefill.push_back(it.prefill_ms);
    total.push_back(it.total_ms);
    decode.insert(decode.end(), it.decode_ms.begin(), it.decode_ms.end());
    decode_device.insert(decode_device.end(), it.decode_device_ms.begin(), it.decode_device_ms.end());
    decode_idle.insert(decode_idle.end(), it.decode_idle_ms.begin(), it.decode_idle_ms.end());
  }
  nlohmann::ordered_json result = {
      {"command", options.command_line},
      {"model", options.model_dir},
      {"architecture", model_config.architecture},
      {"device", config.device.kind},
      {"gpu", config.device.gpu_name},
      {"cuda_graphs", config.device.kind == "cuda" && !config.device.enforce_eager},
      {"async_scheduling", engine.async_scheduling()},
      {"tensor_parallel_size", config.device.tensor_parallel_size},
      {"expert_parallel", config.device.enable_expert_parallel},
      {"batch_size", options.batch_size},
      {"input_len", options.input_len},
      {"output_len", options.output_len},
      {"num_iters", options.num_iters},
      {"startup_s", bench.startup_s},
      {"avg_latency", [&] { double s = 0; for (double t : total) s += t; return s / total.size() / 1e3; }()},
      {"latencies", nlohmann::json(total) /* ms */},
      {"percentiles", {{"50", latency_percentile(total, 50) / 1e3}, {"90", latency_percentile(total, 90) / 1e3}, {"99", latency_percentile(total, 99) / 1e3}}},
      {"prefill_ms_median", median(prefill)},
      {"decode_step_ms_median", median(decode)},
      {"decode_step_ms_p90", latency_percentile(decode, 90)},
      // From the upload to the download of a decode step on the device; the rest of the wall
      // time is the host's (scheduling, staging, delivery) while the GPU idles.
      {"decode_step_device_ms_median", median(decode_device)},
      // The device's idle gap between the end of one decode step and the start of the next:
      // the host's planning between them, unless asynchronous scheduling hides it.
      {"decode_gpu_idle_us_median", median(decode_idle) * 1e3},
      {"decode_gpu_idle_us_p90", latency_percentile(decode_idle, 90) * 1e3},
      {"decode_tokens_per_s", options.batch_size / (median(decode) / 1e3)},
  };
#ifdef TACHYON_HAVE_CUDA
  if (config.device.kind == "cuda") {
    // The floor at the mean context of the decode steps. With tensor parallelism every GPU reads
    // its 1/tp of the bytes at once (kv heads replicated past tp > KV are ignored: a few %).
    const double bandwidth = cuda::measure_copy_bandwidth();
    const int tp = config.device.tensor_parallel_size;
    const bool fp8 = config.device.quantization == "fp8" || model_config.quantization.quantized();
    const bool fp8_kv = config.device.kv_cache_dtype == DType::kF8E4M3;
    const bool fp8_experts = fp8 && model::kServedFp8RoutedExperts == model::Fp8RoutedExperts::kFp8;
    const double bytes = model::decode_step_min_bytes(model_config, options.batch_size,
                                                      options.input_len + options.output_len / 2, fp8, fp8_kv,
                                                      fp8_experts);
    const double floor_ms = bytes / tp / bandwidth * 1e3;
    result["floor"] = {{"decode_bytes_per_step", bytes},
                       {"fp8_projections", fp8},
                       {"fp8_kv_cache", fp8_kv},
                       {"fp8_routed_experts", fp8_experts},
                       {"tensor_parallel_size", tp},
                       {"copy_bandwidth_bytes_per_s", bandwidth},
                       {"decode_step_floor_ms", floor_ms},
                       {"decode_step_ratio_to_floor", median(decode) / floor_ms}};
  }
#endif
  if (!speculative.is_null()) {
    // A decode step yields 1 + accepted tokens per sequence: tokens over the decode steps' time.
    double decode_ms = 0;
    int64_t decode_tokens = 0;
    for (const Iteration& it : timed) {
      for (double ms : it.decode_ms) decode_ms += ms;
      decode_tokens += it.decode_tokens;
    }
    result["decode_tokens_per_s"] = decode_ms > 0 ? static_cast<double>(decode_tokens) / (decode_ms / 1e3) : 0.0;
    result["speculative"] = speculative;
  }
  std::printf("%s\n", result.dump(2).c_str());
  std::fputs(speculative_line(speculative).c_str(), stderr);
  if (!options.output_json.empty()) {
    std::ofstream out(options.output_json);
    TACHYON_CHECK(out.good()) << "cannot write " << options.output_json;
    out << result.dump(2) << "\n";
  }
}

}  // namespace

void add_bench_latency_command(CLI::App& bench, const std::string& command_line) {
  auto options = std::make_shared<LatencyOptions>();
  options->command_line = command_line;
  CLI::App* cmd = bench.add_subcommand("latency", "time one batch end to end in-process: prefill, decode step, total");
  cmd->add_option("model", options->model_dir, "HF model directory")->required();
  cmd->add_option("--batch-size", options->batch_size, "prompts in the batch")->default_val(1)->check(CLI::Range(1, 4096));
  cmd->add_option("--input-len", options->input_len, "prompt tokens (random ids)")->default_val(128)->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--output-len", options->output_len, "generated tokens per prompt")->default_val(256)->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--num-iters", options->num_iters, "timed iterations")->default_val(5)->check(CLI::Range(1, 1000));
  cmd->add_option("--num-iters-warmup", options->num_iters_warmup, "untimed iterations first")->default_val(2)->check(CLI::Range(0, 1000));
  cmd->add_option("--max-num-batched-tokens", options->max_num_batched_tokens, "tokens per step (prefill chunk)")->default_val(8192);
  cmd->add_option("--output-json", options->output_json, "write the result here too");
  add_device_options(*cmd, options->device);
  add_speculative_options(*cmd, options->speculative);
  cmd->callback([options] { run_latency(*options); });
}

}  // namespace tachyon::cli
