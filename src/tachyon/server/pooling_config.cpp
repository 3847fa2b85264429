#include "tachyon/server/pooling_config.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "tachyon/base/check.h"

namespace tachyon::server {
namespace {

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  TACHYON_CHECK(in.good()) << "cannot read " << path.string();
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    TACHYON_FAIL() << path.string() << " is not valid JSON: " << e.what();
  }
  return {};
}

}  // namespace

const char* pooling_mode_name(PoolingConfig::Mode mode) {
  switch (mode) {
    case PoolingConfig::Mode::kMean: return "mean";
    case PoolingConfig::Mode::kCls: return "cls";
    case PoolingConfig::Mode::kLast: return "last";
  }
  return "?";
}

std::optional<PoolingConfig> read_pooling_config(const std::filesystem::path& model_dir) {
  const std::filesystem::path modules_path = model_dir / "modules.json";
  if (!std::filesystem::exists(modules_path)) return std::nullopt;
  const nlohmann::json modules = read_json(modules_path);
  TACHYON_CHECK(modules.is_array()) << modules_path.string() << " must be an array of modules";
  std::optional<PoolingConfig> config;
  bool normalize = false;
  for (const nlohmann::json& module : modules) {
    const std::string type = module.value("type", "");
    if (type.ends_with(".Normalize")) normalize = true;
    if (!type.ends_with(".Pooling")) continue;
    const std::filesystem::path path = model_dir / module.value("path", "") / "config.json";
    const nlohmann::json pooling = read_json(path);
    PoolingConfig c;
    int modes = 0;
    if (pooling.value("pooling_mode_mean_tokens", false)) c.mode = PoolingConfig::Mode::kMean, ++modes;
    if (pooling.value("pooling_mode_cls_token", false)) c.mode = PoolingConfig::Mode::kCls, ++modes;
    if (pooling.value("pooling_mode_lasttoken", false)) c.mode = PoolingConfig::Mode::kLast, ++modes;
    for (const char* other : {"pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens"}) {
      TACHYON_CHECK(!pooling.value(other, false)) << path.string() << ": " << other << " is not supported (mean, cls and last token are)";
    }
    TACHYON_CHECK(modes == 1) << path.string() << " must set exactly one of pooling_mode_mean_tokens, pooling_mode_cls_token, "
                              << "pooling_mode_lasttoken";
    config = c;
  }
  if (config) config->normalize = normalize;
  return config;
}

std::optional<PoolingConfig> resolve_pooling_config(const std::filesystem::path& model_dir, const std::string& mode_flag,
                                                    bool normalize_flag) {
  std::optional<PoolingConfig> flags;
  if (!mode_flag.empty()) {
    PoolingConfig c;
    if (mode_flag == "mean") {
      c.mode = PoolingConfig::Mode::kMean;
    } else if (mode_flag == "cls") {
      c.mode = PoolingConfig::Mode::kCls;
    } else {
      TACHYON_CHECK(mode_flag == "last") << "--pooling must be last, mean or cls, got '" << mode_flag << "'";
      c.mode = PoolingConfig::Mode::kLast;
    }
    c.normalize = normalize_flag;
    flags = c;
  }
  const std::optional<PoolingConfig> directory = read_pooling_config(model_dir);
  if (!directory) {
    TACHYON_CHECK(flags || !normalize_flag)
        << "--normalize-embeddings needs a pooling: " << model_dir.string()
        << " has no sentence-transformers pooling config (modules.json), so name one with --pooling last|mean|cls";
    return flags;
  }
  // The directory's config is what the model was trained with: a flag may repeat it, never change it.
  const bool contradicts = (flags && (flags->mode != directory->mode || flags->normalize != directory->normalize)) ||
                           (!flags && normalize_flag && !directory->normalize);
  TACHYON_CHECK(!contradicts) << model_dir.string() << " declares " << pooling_mode_name(directory->mode) << " pooling"
                              << (directory->normalize ? ", normalized" : ", not normalized")
                              << " (modules.json); --pooling / --normalize-embeddings may only repeat it";
  return directory;
}

}  // namespace tachyon::server
