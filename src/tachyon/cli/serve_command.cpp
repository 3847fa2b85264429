// tachyon serve: the OpenAI-compatible server. SIGTERM / SIGINT start a graceful shutdown
// (503 for new requests, in-flight ones finish within --shutdown-timeout, the rest are aborted),
// then the process exits 0. An engine that fails (a step threw: engine/engine_failure.h) has
// answered every request with its error; the server answers 503 for a second, then shuts down
// the same way and exits kEngineFailedExitCode (3), for a supervisor to restart it.
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <map>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>

#include "tachyon/cli/commands.h"
#include "tachyon/cli/default_model.h"
#include "tachyon/cli/hub_cache.h"
#include "tachyon/app/runner_factory.h"
#include "tachyon/server/http/http_server.h"
#include "tachyon/cli/role_options.h"

namespace tachyon::cli {
namespace {

struct ServeOptions {
  server::ServingOptions serving;
  server::HttpOptions http;
  int shutdown_timeout_s = 30;
  double header_timeout_s = 10;
  double idle_timeout_s = 120;
};

std::chrono::milliseconds to_ms(double seconds) { return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000)); }

std::atomic<int> g_signal{0};

// Any thread may take the signal (libraries start threads before main), so the handler only
// records it; a watcher thread does the work.
void on_signal(int number) { g_signal = number; }

// Returns the process's exit status: 0 after a signal, kEngineFailedExitCode after the engine failed.
int run_serve(ServeOptions& options) {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the server

  options.http.shutdown_timeout = std::chrono::seconds(options.shutdown_timeout_s);
  options.http.header_timeout = to_ms(options.header_timeout_s);
  options.http.idle_timeout = to_ms(options.idle_timeout_s);
  if (options.serving.model_dir.empty()) {
    options.serving.model_dir = default_model_dir();
    if (options.serving.served_model_name.empty()) options.serving.served_model_name = kDefaultModelName;
  } else {
    const ResolvedModel model = resolve_model(options.serving.model_dir.string());  // a hub id: cli/hub_cache.h
    options.serving.model_dir = model.dir;
    if (options.serving.served_model_name.empty() && !model.hub_id.empty()) options.serving.served_model_name = model.hub_id;
  }
  check_role_options(options.serving);
  const core::DeviceConfig& device = options.serving.engine.device;
  if (device.node_rank > 0) {  // another node of a multi-node TP group: no HTTP, follow node 0
    std::fprintf(stderr, "[tachyon] node %d of %d: following node 0 at %s:%d\n", device.node_rank, device.nnodes,
                 device.master_addr.c_str(), device.master_port);
    core::EngineConfig config = options.serving.engine;
    app::run_follower_node(options.serving.model_dir, config);
    std::fprintf(stderr, "[tachyon] node %d: node 0 stopped\n", device.node_rank);
    return 0;
  }
    // Listen first, so /health answers 503 while the model loads instead of refusing connections.
  server::HttpServer http(options.http);
  http.bind();
  std::thread listener([&] { http.serve(); });
  std::fprintf(stderr, "[tachyon] loading %s (listening on http://%s:%d)\n", options.serving.model_dir.c_str(),
               options.http.host.c_str(), http.bound_port());
  std::unique_ptr<server::ServingContext> context;
  try {
    context = std::make_unique<server::ServingContext>(options.serving);
  } catch (...) {
    http.shutdown();
    listener.join();
    throw;
  }
  http.set_context(*context);
  const server::ChatParsers& parsers = context->chat_parsers();
  std::fprintf(stderr, "[tachyon] chat output: tool-call parser %s, reasoning parser %s\n",
               parsers.tool.empty() ? "none" : parsers.tool.c_str(),
               parsers.reasoning.empty() ? "none" : parsers.reasoning.c_str());
  std::fprintf(stderr, "[tachyon] serving %s on http://%s:%d\n", context->limits().model_name.c_str(),
               options.http.host.c_str(), http.bound_port());
  if (!context->role().empty()) {
    std::fprintf(stderr, "[tachyon] role %s (KV transfer port %d)\n", context->role().c_str(), context->kv_transfer_port());
  }
  bool engine_failed = false;
  std::thread waiter([&] {
    while (g_signal == 0 && !engine_failed) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      engine_failed = context->engine().failure().has_value();
    }
    if (engine_failed) {
      // The failure already ended every request with its error; the second lets their answers go
      // out and shows probes the 503 with the reason before the process exits.
      std::fprintf(stderr, "[tachyon] the engine failed: exiting with status %d\n", engine::kEngineFailedExitCode);
      std::this_thread::sleep_for(std::chrono::seconds(1));
    } else {
      std::fprintf(stderr, "[tachyon] signal %d: draining\n", g_signal.load());
    }
    http.shutdown();
  });
  listener.join();
  waiter.join();
  std::fprintf(stderr, "[tachyon] stopped\n");
  return engine_failed ? engine::kEngineFailedExitCode : 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  cmd->add_option("model", options->serving.model_dir,
                  "HF model directory (config.json, safetensors, tokenizer.json) or hub id (Org/Name) in the local HF cache; "
                  "none: the built-in canary model");
  cmd->add_option("--host", options->http.host, "address to listen on")->default_val("127.0.0.1");
  cmd->add_option("--port", options->http.port, "port (0: any free port)")->default_val(8000);
  cmd->add_option("--served-model-name", options->serving.served_model_name, "model name clients use (default: directory name)");
  cmd->add_option("--api-key", options->http.api_key, "require 'Authorization: Bearer KEY' on /v1/*");
  cmd->add_option("--max-model-len", options->serving.engine.scheduler.max_model_len, "prompt + output tokens")->default_val(4096);
  cmd->add_option("--max-num-seqs", options->serving.engine.scheduler.max_num_seqs, "sequences per step")->default_val(256);
  cmd->add_option("--max-num-batched-tokens", options->serving.engine.scheduler.max_num_batched_tokens, "tokens per step")
      ->default_val(2048);
  cmd->add_option("--scheduling-policy", options->serving.engine.scheduler.policy,
                  "which work goes first after running decodes: fair (each client address, or `user` of one, gets "
                  "an even share of prefill, admission and the KV cache), fcfs (arrival), priority (the "
                  "requests' `priority`, then arrival)")
      ->transform(CLI::CheckedTransformer(std::map<std::string, core::SchedulingPolicy>{
          {"fair", core::SchedulingPolicy::kFair}, {"fcfs", core::SchedulingPolicy::kFcfs},
          {"priority", core::SchedulingPolicy::kPriority}}))
      ->default_val("fair")
      ->option_text("fair|fcfs|priority");
  cmd->add_option("--num-blocks", options->serving.engine.num_blocks,
                  "KV cache blocks, per data-parallel replica (--dp D holds D times as many)")
      ->default_val(1024);
  cmd->add_option("--block-size", options->serving.engine.block_size, "tokens per KV block")->default_val(16);
  cmd->add_option("--max-queued-requests", options->serving.engine.max_queued_requests, "waiting requests before 503")
      ->default_val(4096);
  add_device_options(*cmd, options->serving.engine.device);
  add_speculative_options(*cmd, options->serving.engine.speculative);
  add_role_options(*cmd, options->serving);
  cmd->add_option("--shutdown-timeout", options->shutdown_timeout_s, "seconds in-flight requests get on SIGTERM")->default_val(30);
  cmd->add_option("--max-sequences-per-request", options->serving.max_sequences_per_request,
                  "prompts x n of one request (400 above)")
      ->default_val(256)
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-sequences-per-client", options->serving.max_sequences_per_client,
                  "sequences (prompts x n) one client address may have in flight, 429 above (0: half of "
                  "--max-queued-requests; -1: no limit)")
      ->default_val(0);
  cmd->add_option_function<size_t>(
         "--responses-store-mb",
         [options](size_t mb) { options->serving.responses_store_bytes = mb << 20; },
         "MiB of responses kept for /v1/responses' previous_response_id and GET /v1/responses/{id}, least "
         "recently used dropped first (0: none kept)")
      ->default_str("64");
  cmd->add_option("--max-connections", options->http.max_connections,
                  "open connections before new ones get 503 (0: the open-file limit less a reserve)")
      ->default_val(0);
  cmd->add_option("--max-body-bytes", options->http.max_body_bytes, "request body limit (413 above)")
      ->default_val(size_t{8} << 20)
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  cmd->add_option("--tool-call-parser", options->serving.tool_call_parser,
                  "how chat answers are read for tool calls: auto (from the chat template), none, hermes, "
                  "llama3_json, deepseek_v3, glm45, mistral, qwen3_coder")
      ->default_val("auto");
  cmd->add_option("--reasoning-parser", options->serving.reasoning_parser,
                  "how chat answers are split into reasoning_content and content: auto (from the chat template), "
                  "none, qwen3, deepseek_r1, deepseek_v3, glm45")
      ->default_val("auto");
  cmd->add_option("--pooling", options->serving.pooling,
                  "/v1/embeddings for a model directory without a sentence-transformers pooling config "
                  "(modules.json): last, mean or cls (decoder embedding models such as Qwen3-Embedding: last)")
      ->check(CLI::IsMember({"last", "mean", "cls"}));
  cmd->add_flag("--normalize-embeddings", options->serving.normalize_embeddings,
                "with --pooling: embeddings are made unit length (L2), as a Normalize module does");
  cmd->add_option("--header-timeout", options->header_timeout_s,
                  "seconds from a request's first byte to the end of its head (408 after)")
      ->default_val(10)
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option("--idle-timeout", options->idle_timeout_s, "seconds a connection may wait between requests")
      ->default_val(120)
      ->check(CLI::Range(0.1, 86400.0));
  cmd->callback([options] {
    const int status = run_serve(*options);
    if (status != 0) std::exit(status);
  });
}

}  // namespace tachyon::cli
