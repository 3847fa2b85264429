// The tachyon binary with decode context parallelism on CPU thread ranks: generate with
// --tp 2 --dcp 2 (and --decode-context-parallel-size 2 --dcp-kv-cache-interleave-size 2) prints
// the greedy ids of --tp 1 on tiny DeepSeek-V3.2 over a prompt past its top-8; untested
// combinations exit 1 with one line naming why (a dense model, --dcp not dividing --tp, FP8 KV).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_tiny_model_test.h"

namespace tachyon {
namespace {

using CliDcpTest = testing::CliTinyModelTest;

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
  const std::string dense = make("llama", "tiny");
  r = testing::run_cli(dense + " --tp 2 --dcp 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("has no latent attention"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tachyon
