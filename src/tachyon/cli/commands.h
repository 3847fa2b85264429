// Each subcommand registers itself on the app; its callback runs inside app.parse().
#pragma once

#include <CLI/CLI.hpp>

namespace tachyon::cli {

void add_make_model_command(CLI::App& app);
void add_generate_command(CLI::App& app);
#ifdef TACHYON_HAVE_HTTP
void add_serve_command(CLI::App& app);
#endif

}  // namespace tachyon::cli
