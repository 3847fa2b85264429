// Scaffolding: replaced by the implementation in progress (issue 6).
#include "tachyon/base/check.h"
#include "tachyon/cli/commands.h"

namespace tachyon::cli {

void add_bench_serve_command(CLI::App& bench, const std::string& command_line) {
  bench.add_subcommand("serve", "load-test an OpenAI-compatible server (in progress)")->callback([] {
    TACHYON_FAIL() << "bench serve is not built yet";
  });
}

}  // namespace tachyon::cli
