#include "tachyon/cli/router_allocator.h"

#include <malloc.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace tachyon::cli {
namespace {

constexpr const char* kTcacheOff = "glibc.malloc.tcache_count=0";

// This process's arguments as the kernel holds them (the CLI parser has consumed main's argv).
std::vector<std::string> own_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t at = 0; at < raw.size();) {
    const size_t end = raw.find('\0', at);
    args.push_back(raw.substr(at, end == std::string::npos ? std::string::npos : end - at));
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return args;
}

}  // namespace

void bound_router_allocator() {
  mallopt(M_ARENA_MAX, 1);
  const char* given = std::getenv("GLIBC_TUNABLES");
  const std::string tunables = given != nullptr ? given : "";
  if (tunables.find("glibc.malloc.tcache_count") != std::string::npos) return;  // set, by the caller or by us
  std::vector<std::string> args = own_arguments();
  if (args.empty()) return;
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  ::setenv("GLIBC_TUNABLES", (tunables.empty() ? std::string(kTcacheOff) : tunables + ":" + kTcacheOff).c_str(), 1);
  ::execv("/proc/self/exe", argv.data());
  const int error = errno;  // still here: run with the caches, which only hold memory
  if (given != nullptr) {
    ::setenv("GLIBC_TUNABLES", tunables.c_str(), 1);
  } else {
    ::unsetenv("GLIBC_TUNABLES");
  }
  std::fprintf(stderr, "[tachyon] router: could not restart with glibc's per-thread malloc caches off (%s); "
               "its heap may grow by a few MiB as they fill\n", std::strerror(error));
}

}  // namespace tachyon::cli
