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

// Writes bytes whole or not at all: a private temporary file in the same folder, then renamed
// over `path`, so a reader never sees half a file. Throws Error naming the path on failure.
void write_file_atomically(const std::filesystem::path& path, const std::string& bytes);

// The first of several concurrent writers wins: the bytes go to a private temporary file that is
// then hard-linked to `path`, which fails if `path` exists. Returns true when these bytes are now
// at `path`, false when a file was already there (left as it is). Several processes timing the
// same kernel choices agree through this on one set (the one that landed first), instead of each
// running with its own while the file holds the last writer's. Throws Error on other failures.
bool write_file_if_absent(const std::filesystem::path& path, const std::string& bytes);

// Where tachyon keeps per-user caches (tuned GEMM choices, the unpacked default model):
// $XDG_CACHE_HOME/tachyon, else ~/.cache/tachyon, else <temp dir>/tachyon. Not created here.
std::filesystem::path user_cache_dir();

}  // namespace tachyon
