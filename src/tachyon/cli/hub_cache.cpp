#include "tachyon/cli/hub_cache.h"

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "tachyon/base/check.h"

namespace tachyon::cli {
namespace fs = std::filesystem;
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// Org/Name: two non-empty parts of letters, digits and -_. (the hub's own rule), nothing else.
bool is_hub_id(const std::string& text) {
  const size_t slash = text.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == text.size() || text.find('/', slash + 1) != std::string::npos) {
    return false;
  }
  if (text[0] == '.' || text[slash + 1] == '.') return false;
  for (char c : text) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/';
    if (!ok) return false;
  }
  return true;
}

std::string read_revision(const fs::path& ref) {
  std::ifstream in(ref);
  std::string revision;
  std::getline(in, revision);
  while (!revision.empty() && std::isspace(static_cast<unsigned char>(revision.back()))) revision.pop_back();
  return revision;
}

}  // namespace

fs::path hub_cache_dir() {
  if (const std::string cache = env("HF_HUB_CACHE"); !cache.empty()) return cache;
  if (const std::string home = env("HF_HOME"); !home.empty()) return fs::path(home) / "hub";
  return fs::path(env("HOME")) / ".cache" / "huggingface" / "hub";
}

ResolvedModel resolve_model(const std::string& given) {
  // A directory, or a path that cannot be a hub id (/abs, ./rel, a/b/c), goes to the loader as
  // given: its error ("no config.json in ...") names what is missing there.
  if (fs::is_directory(given) || (!is_hub_id(given) && given.find('/') != std::string::npos)) return {given, ""};
  TACHYON_CHECK(is_hub_id(given)) << "the model '" << given << "' is neither a directory nor a hub id (Org/Name)";
  const std::string org = given.substr(0, given.find('/'));
  const std::string name = given.substr(given.find('/') + 1);
  const fs::path repo = hub_cache_dir() / ("models--" + org + "--" + name);
  const fs::path ref = repo / "refs" / "main";
  std::vector<std::string> looked{fs::path(given).string() + " (as a directory)", ref.string()};
  if (fs::is_regular_file(ref)) {
    const fs::path snapshot = repo / "snapshots" / read_revision(ref);
    if (fs::is_regular_file(snapshot / "config.json")) return {snapshot, given};
    looked.push_back((snapshot / "config.json").string());
  }
  std::string paths;
  for (const std::string& p : looked) paths += "\n  " + p;
  TACHYON_FAIL() << "the model '" << given << "' is not in the local Hugging Face cache; looked in:" << paths
                       << "\n(the cache is $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub; nothing is "
                          "downloaded: fetch it with huggingface-cli download on a machine that reaches the hub)";
  return {};
}

}  // namespace tachyon::cli
