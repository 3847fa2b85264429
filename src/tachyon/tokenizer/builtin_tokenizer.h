// A small byte-level tokenizer of our own: the 256 bytes as tokens (no merges) plus ChatML's
// special tokens and chat template. It lets `tachyon serve` with no model argument run a
// self-contained default model without any downloaded file; every text round-trips exactly.
#pragma once

#include <filesystem>

namespace tachyon::tokenizer {

// Writes tokenizer.json and tokenizer_config.json into `dir` (created if needed).
void write_builtin_tokenizer(const std::filesystem::path& dir);

}  // namespace tachyon::tokenizer
