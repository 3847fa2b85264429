// tachyon command line: one subcommand per file (make_model_command.cpp, generate_command.cpp ...).
// Errors from the library arrive as tachyon::Error and leave as one line on stderr and exit code 1.
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "tachyon/base/check.h"
#include "tachyon/cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"tachyon: LLM inference engine"};
  app.require_subcommand(1);
  tachyon::cli::add_make_model_command(app);
  tachyon::cli::add_generate_command(app);
  std::string command_line;
  for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);
  CLI::App* bench = app.add_subcommand("bench", "benchmarks: latency and throughput (in-process), serve (any OpenAI-compatible server)");
  bench->require_subcommand(1);
  tachyon::cli::add_bench_latency_command(*bench, command_line);
  tachyon::cli::add_bench_throughput_command(*bench, command_line);
#ifdef TACHYON_HAVE_HTTP
  tachyon::cli::add_serve_command(app);
  tachyon::cli::add_router_command(app);
  tachyon::cli::add_bench_serve_command(*bench, command_line);
  tachyon::cli::add_eval_command(app, command_line);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tachyon::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
