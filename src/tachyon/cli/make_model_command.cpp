#include "tachyon/cli/commands.h"
namespace tachyon::cli {
void add_make_model_command(CLI::App& app) { app.add_subcommand("make-model", "write a random-weight HF model directory"); }
}  // namespace tachyon::cli
