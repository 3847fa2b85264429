// The tachyon binary with prefill context parallelism on CPU thread ranks: generate with --pcp 2
// and --prefill-context-parallel-size 3 prints the greedy ids of the one-rank run on tiny
// DeepSeek-V3.2 over a prompt past its top-8 (and on tiny Llama); untested combinations exit 1
// with one line naming why (--tp, --dcp, FP8 KV, speculation, a group size no test covers).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "../cli_run.h"

namespace tachyon {
namespace {

class CliPcpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tachyon-cli-pcp-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string make(const std::string& arch, const std::string& preset) {
    std::filesystem::remove_all(dir_);
    EXPECT_EQ(testing::run_cli("make-model --arch " + arch + " --preset " + preset + " --seed 3 --out " + dir_.string())
                  .exit_code,
              0);
    return "generate " + dir_.string() + " --device cpu --max-tokens 6 --prompt-ids " +
           "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20";
  }

  static std::string first_line(const testing::CliRun& r) { return r.output.substr(0, r.output.find('\n')); }

  std::filesystem::path dir_;
};

TEST_F(CliPcpTest, PcpRanksPrintTheOneRankIds) {
  for (const auto& [arch, preset] : {std::pair{"deepseek_v32", "tiny-dsa"}, std::pair{"llama", "tiny"}}) {
    const std::string args = make(arch, preset);
    const testing::CliRun one = testing::run_cli(args);
    ASSERT_EQ(one.exit_code, 0) << one.output;
    for (const std::string flags : {" --pcp 2", " --prefill-context-parallel-size 3"}) {
      const testing::CliRun r = testing::run_cli(args + flags);
      ASSERT_EQ(r.exit_code, 0) << arch << flags << ": " << r.output;
      EXPECT_EQ(first_line(r), first_line(one)) << arch << flags << ": " << r.output;
    }
  }
}

TEST_F(CliPcpTest, UntestedCombinationsExitWithTheReason) {
  const std::string dsa = make("deepseek_v32", "tiny-dsa");
  const std::pair<const char*, const char*> cases[] = {
      {" --pcp 2 --tp 2", "--pcp 2 with --tp 2 is not verified"},
      {" --pcp 2 --tp 2 --dcp 2", "--pcp 2 with --tp 2"},
      {" --pcp 2 --kv-cache-dtype fp8", "--pcp 2 with --kv-cache-dtype fp8 is not verified"},
      {" --pcp 2 --speculative-method ngram --num-speculative-tokens 2", "--speculative-method ngram is not verified"},
      {" --pcp 5", "--pcp 5 is not verified by any test"},
  };
  for (const auto& [flags, why] : cases) {
    const testing::CliRun r = testing::run_cli(dsa + flags);
    EXPECT_EQ(r.exit_code, 1) << flags << ": " << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << flags << ": " << r.output;
  }
}

}  // namespace
}  // namespace tachyon
