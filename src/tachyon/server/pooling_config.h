// A model directory's sentence-transformers pooling config: modules.json naming a Pooling module
// (its folder's config.json says how token states become one vector: mean, cls or last token) and
// optionally a Normalize module. Read once at start-up; /v1/embeddings serves only models that
// have one (routes_embeddings.cpp). A pooling mode other than these three is refused by name.
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

}  // namespace tachyon::server
