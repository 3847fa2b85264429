// Runs the real tachyon binary (TACHYON_CLI) as a user would and captures what it prints
// (stdout and stderr together) and its exit code. Shared by the CLI, eval and bench tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace tachyon::testing {

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

inline CliRun run_cli(const std::string& args) {
  const std::string command = std::string(TACHYON_CLI) + " " + args + " 2>&1";
  CliRun result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

}  // namespace tachyon::testing
