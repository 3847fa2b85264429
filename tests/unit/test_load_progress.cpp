// Weight-loading progress lines (model/load_progress.h): one per tenth of the bytes, in order,
// ending at 100%; none for a checkpoint under the size that prints (the README's quickstart
// model is one: test_cli's README test checks its output stays exactly the answer), and the
// loader printing them for a checkpoint above it.
// ctest -R load_progress
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "../cli_run.h"
#include "tachyon/model/load_progress.h"

namespace tachyon::model::load_progress_test {

std::string lines_for(int64_t total, int64_t min_bytes, const std::vector<int64_t>& tensors) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = ::open_memstream(&buffer, &size);
  {
    LoadProgress progress(total, static_cast<int64_t>(tensors.size()), out, min_bytes);
    for (int64_t bytes : tensors) progress.add(bytes);
  }
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

TEST(LoadProgress, OneLinePerTenthOfTheBytes) {
  // 4 tensors of 3e9, 1e9, 5e9, 1e9 bytes: 30%, 40%, 90%, 100%.
  const std::string text = lines_for(10'000'000'000, 1, {3'000'000'000, 1'000'000'000, 5'000'000'000, 1'000'000'000});
  EXPECT_EQ(text,
            "[tachyon] loading weights: 30% (3.0 of 10.0 GB, 1 of 4 tensors)\n"
            "[tachyon] loading weights: 40% (4.0 of 10.0 GB, 2 of 4 tensors)\n"
            "[tachyon] loading weights: 90% (9.0 of 10.0 GB, 3 of 4 tensors)\n"
            "[tachyon] loading weights: 100% (10.0 of 10.0 GB, 4 of 4 tensors)\n");
  // Many small tensors: still one line per tenth.
  const std::string many = lines_for(1000, 1, std::vector<int64_t>(100, 10));
  EXPECT_EQ(std::count(many.begin(), many.end(), '\n'), 10) << many;
}

TEST(LoadProgress, SmallCheckpointsLoadSilently) {
  EXPECT_EQ(lines_for(LoadProgress::kMinBytes - 1, LoadProgress::kMinBytes, {LoadProgress::kMinBytes - 1}), "");
  EXPECT_NE(lines_for(LoadProgress::kMinBytes, LoadProgress::kMinBytes, {LoadProgress::kMinBytes}), "");
}

// Through the loader: a 343 MB checkpoint (Qwen3-0.6B's shapes, one layer) prints its lines on
// the way to its answer (about 10 s: the smallest real shape above the threshold).
TEST(LoadProgress, TheLoaderPrintsThemForALargeCheckpoint) {
  const auto dir = std::filesystem::temp_directory_path() / ("tachyon-progress-" + std::to_string(::getpid()));
  const auto made = tachyon::testing::run_cli("make-model --arch qwen3 --preset qwen3-0.6b --num-layers 1 --dtype bf16 --seed 1 --out " +
                                     dir.string());
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const auto run = tachyon::testing::run_cli("generate " + dir.string() + " --prompt-ids 1,2,3 --max-tokens 1");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("[tachyon] loading weights: 90% (0.3 of 0.3 GB, 1 of 13 tensors)\n"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("[tachyon] loading weights: 100% (0.3 of 0.3 GB, 13 of 13 tensors)\n"), std::string::npos) << run.output;
}

}  // namespace tachyon::model::load_progress_test
