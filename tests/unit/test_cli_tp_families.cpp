// The tachyon binary with --tp 2 --device cpu on the MoE, latent-attention and sparse-attention
// families: generate prints the same greedy ids as --tp 1, with and without
// --enable-expert-parallel; the flag on a model without experts, or with --tp 1, exits 1 with
// one line naming why. (Which of these the GPU's ranks take under --tp is
// cuda_tp_unsupported_reason's, tested in test_tp_families.cpp: this build may have no CUDA.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "../cli_run.h"

namespace tachyon {
namespace {

class CliTpFamiliesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tachyon-cli-tp-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // The first line generate prints: the generated ids.
  static std::string ids_of(const testing::CliRun& r) { return r.output.substr(0, r.output.find('\n')); }

  void expect_ranks_match(const std::string& arch, const std::string& preset) {
    SCOPED_TRACE(preset);
    std::filesystem::remove_all(dir_);
    ASSERT_EQ(testing::run_cli("make-model --arch " + arch + " --preset " + preset + " --seed 3 --out " + dir_.string())
                  .exit_code,
              0);
    const std::string args = "generate " + dir_.string() + " --prompt-ids 1,2,3,4,5,6,7,8,9,10 --max-tokens 6 --device cpu";
    const testing::CliRun tp1 = testing::run_cli(args + " --tp 1");
    ASSERT_EQ(tp1.exit_code, 0) << tp1.output;
    ASSERT_FALSE(ids_of(tp1).empty()) << tp1.output;
    for (const std::string flags : {" --tp 2", " --tp 2 --enable-expert-parallel"}) {
      const testing::CliRun r = testing::run_cli(args + flags);
      ASSERT_EQ(r.exit_code, 0) << flags << ": " << r.output;
      EXPECT_EQ(ids_of(r), ids_of(tp1)) << flags << ": " << r.output;
    }
  }

  std::filesystem::path dir_;
};

TEST_F(CliTpFamiliesTest, MoeMlaAndDsaModelsRunOnTwoCpuRanks) {
  expect_ranks_match("qwen3_moe", "tiny-moe");
  expect_ranks_match("deepseek_v3", "tiny-deepseek");
  expect_ranks_match("glm_moe_dsa", "tiny-glm-dsa");
}

TEST_F(CliTpFamiliesTest, ExpertParallelWithoutExpertsOrRanksIsRefusedInOneLine) {
  ASSERT_EQ(testing::run_cli("make-model --arch llama --preset tiny --seed 3 --out " + dir_.string()).exit_code, 0);
  const std::string args = "generate " + dir_.string() + " --prompt-ids 1,2,3 --max-tokens 2 --device cpu";
  testing::CliRun r = testing::run_cli(args + " --tp 2 --enable-expert-parallel");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("error: --enable-expert-parallel: LlamaForCausalLM has no mixture-of-experts layer", 0), 0u)
      << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;

  std::filesystem::remove_all(dir_);
  ASSERT_EQ(testing::run_cli("make-model --arch mixtral --preset tiny-mixtral --seed 3 --out " + dir_.string()).exit_code,
            0);
  r = testing::run_cli("generate " + dir_.string() + " --prompt-ids 1,2,3 --max-tokens 2 --device cpu --enable-expert-parallel");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("with --tp 1 there is one rank"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tachyon
