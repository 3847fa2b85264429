#include "tachyon/base/file_util.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

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

namespace {

// A temporary beside `path` that no other process or thread names (tensor-parallel ranks of one
// process write the same files), holding `bytes`.
std::filesystem::path write_private_temporary(const std::filesystem::path& path, const std::string& bytes) {
  std::filesystem::path temporary = path;
  temporary += ".tmp-" + std::to_string(::getpid()) + "-" +
               std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  write_file(temporary, bytes);
  return temporary;
}

}  // namespace

void write_file_atomically(const std::filesystem::path& path, const std::string& bytes) {
  const std::filesystem::path temporary = write_private_temporary(path, bytes);
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) std::filesystem::remove(temporary, error);
  TACHYON_CHECK(!error) << "cannot move " << temporary.string() << " to " << path.string() << ": " << error.message();
}

bool write_file_if_absent(const std::filesystem::path& path, const std::string& bytes) {
  const std::filesystem::path temporary = write_private_temporary(path, bytes);
  const int linked = ::link(temporary.c_str(), path.c_str());
  const int link_errno = errno;
  std::error_code ignored;
  std::filesystem::remove(temporary, ignored);
  if (linked == 0) return true;
  TACHYON_CHECK(link_errno == EEXIST) << "cannot create " << path.string() << ": " << std::strerror(link_errno);
  return false;
}

std::filesystem::path user_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "tachyon";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache" / "tachyon";
  return std::filesystem::temp_directory_path() / "tachyon";
}

}  // namespace tachyon
