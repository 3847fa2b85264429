// Scaffolding: replaced by the implementation in progress (issue 6).
#include "tachyon/base/check.h"
#include "tachyon/cli/commands.h"

namespace tachyon::cli {

void add_eval_command(CLI::App& app, const std::string& command_line) {
  app.add_subcommand("eval", "few-shot exact-match accuracy (in progress)")->callback([] {
    TACHYON_FAIL() << "eval is not built yet";
  });
}

}  // namespace tachyon::cli
