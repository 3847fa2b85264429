// The CPU forward's thread policy (runner/cpu_threads.h): the user's OMP_NUM_THREADS wins; a
// small model runs on one thread; a larger one on every core.
#include <gtest/gtest.h>

#include "tachyon/model/decode_bytes.h"
#include "tachyon/model/make_model.h"
#include "tachyon/model/model_config.h"
#include "tachyon/runner/cpu_threads.h"

namespace tachyon::runner {
namespace {

TEST(CpuThreads, TheUsersChoiceWinsThenSmallModelsTakeOneThread) {
  EXPECT_EQ(cpu_forward_threads(1e9, 16, "3"), 0);
  EXPECT_EQ(cpu_forward_threads(1e6, 16, "8"), 0);
  EXPECT_EQ(cpu_forward_threads(1e6, 16, nullptr), 1);
  EXPECT_EQ(cpu_forward_threads(1e6, 16, ""), 1);
  EXPECT_EQ(cpu_forward_threads(kSmallModelDecodeBytes, 16, nullptr), 16);
  EXPECT_EQ(cpu_forward_threads(1e9, 0, nullptr), 1);
}

TEST(CpuThreads, TheCanaryIsSmallAndARealModelIsNot) {
  const model::ModelConfig canary =
      model::ModelConfig::from_dir(std::filesystem::path(TACHYON_TEST_DATA).parent_path().parent_path() / "assets/canary");
  EXPECT_EQ(cpu_forward_threads(model::decode_step_min_bytes(canary, 1, 0), 2, nullptr), 1);
  const model::ModelConfig qwen3 = model::make_model_config({.arch = "qwen3", .preset = "qwen3-0.6b"});
  EXPECT_EQ(cpu_forward_threads(model::decode_step_min_bytes(qwen3, 1, 0), 2, nullptr), 2);
}

}  // namespace
}  // namespace tachyon::runner
