// Each subcommand registers itself on the app; its callback runs inside app.parse().
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "tachyon/core/engine_config.h"

namespace tachyon::cli {

// --device, --gpu-memory-utilization, --enforce-eager: shared by serve, generate and bench.
void add_device_options(CLI::App& cmd, core::DeviceConfig& device);
// --speculative-method, --num-speculative-tokens, --ngram-min, --ngram-max: the same commands.
void add_speculative_options(CLI::App& cmd, core::SpeculativeConfig& speculative);

void add_make_model_command(CLI::App& app);
void add_generate_command(CLI::App& app);
// `bench latency` under the `bench` subcommand; command_line is recorded in the JSON result.
void add_bench_latency_command(CLI::App& bench, const std::string& command_line);
// `bench throughput`: N random prompts at once, in-process.
void add_bench_throughput_command(CLI::App& bench, const std::string& command_line);
#ifdef TACHYON_HAVE_HTTP
void add_serve_command(CLI::App& app);
// `router`: the prefill/decode disaggregation front (router_command.cpp).
void add_router_command(CLI::App& app);
// `bench serve`: a load generator for any OpenAI-compatible server (bench_serve_command.cpp).
void add_bench_serve_command(CLI::App& bench, const std::string& command_line);
// `eval`: few-shot exact-match accuracy through the completions endpoint (eval_command.cpp).
void add_eval_command(CLI::App& app, const std::string& command_line);
#endif

}  // namespace tachyon::cli
