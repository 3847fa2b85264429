#include "tachyon/cli/commands.h"
namespace tachyon::cli {
void add_generate_command(CLI::App& app) { app.add_subcommand("generate", "greedy generation"); }
}  // namespace tachyon::cli
