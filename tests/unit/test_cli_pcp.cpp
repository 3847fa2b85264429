// The tachyon binary with prefill context parallelism on CPU thread ranks: generate with --pcp 2,
// --prefill-context-parallel-size 3, --tp 2 --pcp 2, --tp 2 --dcp 2 --pcp 2, --pcp 2 with n-gram
// drafts and with --async-scheduling on prints the greedy ids of the one-rank run on tiny
// DeepSeek-V3.2 over a prompt past its top-8 (and on tiny Llama, --tp 1); untested combinations
// exit 1 with one line naming why (a --tp x --pcp grid no test covers, --tp on a dense model,
// --dcp, a group size no test covers); FP8 weights and KV print the one rank's FP8 ids, and MTP
// drafts the one rank's plain ids.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_tiny_model_test.h"

namespace tachyon {
namespace {

using CliPcpTest = testing::CliTinyModelTest;

TEST_F(CliPcpTest, PcpRanksPrintTheOneRankIds) {
  for (const auto& [arch, preset] : {std::pair{"deepseek_v32", "tiny-dsa"}, std::pair{"llama", "tiny"}}) {
    const std::string args = make(arch, preset);
    const testing::CliRun one = testing::run_cli(args);
    ASSERT_EQ(one.exit_code, 0) << one.output;
    for (const std::string flags :
         {" --pcp 2", " --prefill-context-parallel-size 3", " --tp 2 --pcp 2", " --tp 2 --dcp 2 --pcp 2",
          " --pcp 2 --speculative-method ngram --num-speculative-tokens 2 --ngram-min 1 --ngram-max 2",
          " --pcp 2 --async-scheduling on"}) {
      if (flags.find("--tp") != std::string::npos && std::string(arch) == "llama") continue;  // refused: untested
      const testing::CliRun r = testing::run_cli(args + flags);
      ASSERT_EQ(r.exit_code, 0) << arch << flags << ": " << r.output;
      EXPECT_EQ(first_line(r), first_line(one)) << arch << flags << ": " << r.output;
    }
  }
}

TEST_F(CliPcpTest, UntestedCombinationsExitWithTheReason) {
  const std::string dsa = make("deepseek_v32", "tiny-dsa");
  const std::pair<const char*, const char*> cases[] = {
      {" --pcp 4 --tp 2", "--pcp 4 with --tp 2 is not verified"},
      {" --pcp 3 --tp 2 --dcp 2", "--pcp 3 with --dcp 2 (--tp 2) is not verified"},
      {" --pcp 5", "--pcp 5 is not verified by any test"},
  };
  for (const auto& [flags, why] : cases) {
    const testing::CliRun r = testing::run_cli(dsa + flags);
    EXPECT_EQ(r.exit_code, 1) << flags << ": " << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << flags << ": " << r.output;
  }
  // FP8 weights and an FP8 KV cache: the one rank's FP8 ids.
  const std::string fp8 = " --kv-cache-dtype fp8 --quantization fp8";
  const testing::CliRun one_fp8 = testing::run_cli(dsa + fp8), pcp_fp8 = testing::run_cli(dsa + fp8 + " --pcp 2");
  ASSERT_EQ(pcp_fp8.exit_code, 0) << pcp_fp8.output;
  EXPECT_EQ(first_line(pcp_fp8), first_line(one_fp8));
  // MTP drafts (the ranks return the hidden states the module reads): the one rank's plain ids.
  const std::string with_mtp = make("deepseek_v3", "tiny-deepseek-mtp");
  const testing::CliRun one_mtp = testing::run_cli(with_mtp);
  const testing::CliRun pcp_mtp =
      testing::run_cli(with_mtp + " --pcp 2 --speculative-method mtp --num-speculative-tokens 2");
  ASSERT_EQ(pcp_mtp.exit_code, 0) << pcp_mtp.output;
  EXPECT_EQ(first_line(pcp_mtp), first_line(one_mtp));
  const testing::CliRun dense = testing::run_cli(make("llama", "tiny") + " --tp 2 --pcp 2");
  EXPECT_EQ(dense.exit_code, 1) << dense.output;
  EXPECT_NE(dense.output.find("is verified on the latent-attention models only"), std::string::npos) << dense.output;
}

}  // namespace
}  // namespace tachyon
