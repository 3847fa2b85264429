// `tachyon router --prefill URL... --decode URL... [--port P] [--policy P]`: the front of prefill/decode
// disaggregation (server/http/pd_router.h, docs/disaggregation.md). Stops on SIGTERM or SIGINT.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <thread>

#include "tachyon/cli/commands.h"
#include "tachyon/cli/router_allocator.h"
#include "tachyon/server/http/pd_router.h"

namespace tachyon::cli {
namespace {

std::atomic<int> g_router_signal{0};
void on_router_signal(int number) { g_router_signal = number; }

void run_router(server::RouterOptions& options) {
  bound_router_allocator();  // before any thread: one arena, no per-thread caches (router_allocator.h)
  std::signal(SIGTERM, on_router_signal);
  std::signal(SIGINT, on_router_signal);
  std::signal(SIGPIPE, SIG_IGN);
  server::PdRouter router(options);
  const int port = router.bind();
  std::fprintf(stderr, "[tachyon] router on http://%s:%d (%zu prefill, %zu decode)\n", options.host.c_str(), port,
               options.prefill.size(), options.decode.size());
  std::thread waiter([&] {
    while (g_router_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    router.stop();
  });
  router.serve();
  waiter.join();
  std::fprintf(stderr, "[tachyon] router stopped\n");
}

}  // namespace

void add_router_command(CLI::App& app) {
  auto options = std::make_shared<server::RouterOptions>();
  CLI::App* cmd = app.add_subcommand("router", "prefill/decode disaggregation front (OpenAI-compatible)");
  cmd->add_option("--prefill", options->prefill, "a prefill server's URL (http://host:port); repeat for several")
      ->required();
  cmd->add_option("--decode", options->decode, "a decode server's URL (http://host:port); repeat for several")
      ->required();
  cmd->add_option("--host", options->host, "address to listen on")->default_val("127.0.0.1");
  cmd->add_option("--port", options->port, "port (0: any free port)")->default_val(8000);
  cmd->add_option("--policy", options->policy,
                  "choice of the prefill server: round-robin, least-loaded (fewest sequences) or prefix (the longest "
                  "cached prefix of the prompt, ties to the least loaded; needs --tokenizer); decode servers go "
                  "round-robin or least-loaded")
      ->default_val("round-robin")
      ->check(CLI::IsMember({"round-robin", "least-loaded", "prefix"}));
  cmd->add_option("--max-in-flight", options->max_in_flight,
                  "requests the router has open at once (each costs a thread until its decode answer starts, then its "
                  "relay's); more get 503 with Retry-After")
      ->default_val(1024)
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--tokenizer", options->tokenizer,
                  "the served model's directory (tokenizer.json, chat template): the prefix policy tokenizes prompts");
  cmd->add_option_function<int>(
         "--health-interval-ms", [options](int ms) { options->health_interval = std::chrono::milliseconds(ms); },
         "how often every server's health (and load, published prefix blocks) is read")
      ->default_val(1000)
      ->check(CLI::Range(10, 60000));
  cmd->callback([options] { run_router(*options); });
}

}  // namespace tachyon::cli
