// The model `tachyon serve` and `tachyon generate` use when no model is named: the canary
// (assets/canary, docs/eval.md), a ~5M-parameter Qwen3 that solves the canary task's arithmetic
// word problems. Its files are linked into the binary, so the first command of the README answers
// correctly on a machine with nothing downloaded.
#pragma once

#include <filesystem>
#include <string_view>

namespace tachyon::cli {

inline constexpr std::string_view kDefaultModelName = "tachyon-canary";

// Writes the embedded files once into $XDG_CACHE_HOME/tachyon/canary-<content hash>/ (falling
// back to ~/.cache, then the temp directory) and returns that folder. Safe against concurrent
// first runs: each writes a private staging folder and renames it into place.
std::filesystem::path default_model_dir();

}  // namespace tachyon::cli
