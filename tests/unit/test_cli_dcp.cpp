// The tachyon binary with decode context parallelism on CPU thread ranks: generate with
// --tp 2 --dcp 2 (and --decode-context-parallel-size 2 --dcp-kv-cache-interleave-size 2) prints
// the greedy ids of --tp 1 on tiny DeepSeek-V3.2 over a prompt past its top-8; untested
// combinations exit 1 with one line naming why (a dense model, --dcp not dividing --tp, FP8 KV).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "../cli_run.h"

namespace tachyon {
namespace {

class CliDcpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tachyon-cli-dcp-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string make(const std::string& arch, const std::string& preset) {
    EXPECT_EQ(testing::run_cli("make-model --arch " + arch + " --preset " + preset + " --seed 3 --out " + dir_.string())
                  .exit_code,
              0);
    return "generate " + dir_.string() + " --device cpu --max-tokens 6 --prompt-ids " +
           "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20";
  }

  static std::string first_line(const testing::CliRun& r) { return r.output.substr(0, r.output.find('\n')); }

  std::filesystem::path dir_;
};

TEST_F(CliDcpTest, DcpRanksPrintTheOneRankIds) {
  const std::string args = make("deepseek_v32", "tiny-dsa");
  const testing::CliRun tp1 = testing::run_cli(args + " --tp 1");
  ASSERT_EQ(tp1.exit_code, 0) << tp1.output;
  for (const std::string flags : {" --tp 2 --dcp 2", " --tp 2 --decode-context-parallel-size 2 "
                                                     "--dcp-kv-cache-interleave-size 2"}) {
    const testing::CliRun r = testing::run_cli(args + flags);
    ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.output;
    EXPECT_EQ(first_line(r), first_line(tp1)) << flags << ": " << r.output;
  }
}

TEST_F(CliDcpTest, UntestedCombinationsExitWithTheReason) {
  const std::string dsa = make("deepseek_v32", "tiny-dsa");
  testing::CliRun r = testing::run_cli(dsa + " --tp 2 --dcp 4");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--dcp 4 must divide --tp 2"), std::string::npos) << r.output;
  r = testing::run_cli(dsa + " --tp 2 --dcp 2 --kv-cache-dtype fp8");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("--kv-cache-dtype fp8 is not verified"), std::string::npos) << r.output;
  std::filesystem::remove_all(dir_);
  const std::string dense = make("llama", "tiny");
  r = testing::run_cli(dense + " --tp 2 --dcp 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("has no latent attention"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tachyon
