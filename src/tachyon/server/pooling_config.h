// A model directory's sentence-transformers pooling config: modules.json naming a Pooling module
// (its folder's config.json says how token states become one vector: mean, cls or last token) and
// optionally a Normalize module. Read once at start-up; /v1/embeddings serves only models that
// have one, or that `serve --pooling` names for a directory that says nothing (decoder embedding
// models such as Qwen3-Embedding: last-token pooling, normalized). A pooling mode other than
// these three is refused by name; so is a flag that contradicts the directory.
// Tests: tests/server/test_server_embeddings.cpp (ctest -R Embeddings).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace tachyon::server {

struct PoolingConfig {
  enum class Mode { kMean, kCls, kLast };
  Mode mode = Mode::kMean;
  bool normalize = false;  // a Normalize module follows the pooling (unit-length vectors)
};

const char* pooling_mode_name(PoolingConfig::Mode mode);

// nullopt when the directory has no modules.json or it names no Pooling module. Throws
// tachyon::Error naming the file when it is malformed or its mode is not supported.
std::optional<PoolingConfig> read_pooling_config(const std::filesystem::path& model_dir);

// The pooling a server uses: the directory's, or the flags' when it has none. `mode_flag` is
// serve's --pooling ("" when not given; else last, mean or cls), `normalize_flag` its
// --normalize-embeddings. Throws tachyon::Error on an unknown mode, on flags that contradict the
// directory's config, and on --normalize-embeddings with no pooling to normalize.
std::optional<PoolingConfig> resolve_pooling_config(const std::filesystem::path& model_dir, const std::string& mode_flag,
                                                    bool normalize_flag);

}  // namespace tachyon::server
