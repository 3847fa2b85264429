// Small file helpers shared by the model loader, tokenizer and CLI. Every failure names the path.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace tachyon {

// Whole file as bytes; throws Error naming the path when it cannot be read.
std::string read_file(const std::filesystem::path& path);

// Parses a JSON file; throws Error naming the path and the parser's position on bad JSON.
nlohmann::json read_json_file(const std::filesystem::path& path);

// Writes bytes, creating parent folders; throws Error naming the path on failure.
void write_file(const std::filesystem::path& path, const std::string& bytes);

// Where tachyon keeps per-user caches (tuned GEMM choices, the unpacked default model):
// $XDG_CACHE_HOME/tachyon, else ~/.cache/tachyon, else <temp dir>/tachyon. Not created here.
std::filesystem::path user_cache_dir();

}  // namespace tachyon
