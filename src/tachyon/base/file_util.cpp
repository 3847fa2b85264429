#include "tachyon/base/file_util.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tachyon/base/check.h"

namespace tachyon {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  TACHYON_CHECK(in.good()) << "cannot open " << path.string();
  std::ostringstream bytes;
  bytes << in.rdbuf();
  TACHYON_CHECK(!in.bad()) << "cannot read " << path.string();
  return bytes.str();
}

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    TACHYON_FAIL() << "bad JSON in " << path.string() << ": " << e.what();
  }
}

void write_file(const std::filesystem::path& path, const std::string& bytes) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TACHYON_CHECK(out.good()) << "cannot create " << path.string();
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  TACHYON_CHECK(out.good()) << "cannot write " << path.string();
}

std::filesystem::path user_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "tachyon";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache" / "tachyon";
  return std::filesystem::temp_directory_path() / "tachyon";
}

}  // namespace tachyon
