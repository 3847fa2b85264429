// `tachyon serve --role prefill|decode` (prefill/decode disaggregation, docs/disaggregation.md):
// the options, and the refusal of every combination that has no passing disaggregation test
// (DESIGN rule 8), each with a one-line reason.
#pragma once

#include <CLI/CLI.hpp>

#include "tachyon/server/http/serving_context.h"

namespace tachyon::cli {

void add_role_options(CLI::App& cmd, server::ServingOptions& serving);
// Throws Error naming what --role cannot be combined with.
void check_role_options(const server::ServingOptions& serving);

}  // namespace tachyon::cli
