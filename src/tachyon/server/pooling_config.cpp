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

}  // namespace tachyon::server
