// CliTinyModelTest: the fixture of the CLI tests that make a tiny model with the real binary and
// run `generate` on it (test_cli_pcp.cpp, test_cli_dcp.cpp): a fresh folder per test case, named
// after the suite and case, removed afterwards; make(arch, preset) writes the model there (seed 3)
// and returns a greedy generate command of 6 tokens over a 20-token prompt, past the DSA top-8.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "../cli_run.h"

namespace tachyon::testing {

class CliTinyModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("tachyon-" + std::string(test->test_suite_name()) + "-" + std::to_string(::getpid()) + "-" + test->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Replaces the folder's model with a fresh tiny `arch` / `preset` one.
  std::string make(const std::string& arch, const std::string& preset) {
    std::filesystem::remove_all(dir_);
    EXPECT_EQ(run_cli("make-model --arch " + arch + " --preset " + preset + " --seed 3 --out " + dir_.string())
                  .exit_code,
              0);
    return "generate " + dir_.string() + " --device cpu --max-tokens 6 --prompt-ids " +
           "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20";
  }

  // The ids line generate prints first.
  static std::string first_line(const CliRun& r) { return r.output.substr(0, r.output.find('\n')); }

  std::filesystem::path dir_;
};

}  // namespace tachyon::testing
