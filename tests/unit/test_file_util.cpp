// base/file_util.h: whole-file writes that a concurrent reader or writer never sees half done, and
// the first-writer-wins publish that processes timing the same kernel choices agree through.
#include "tachyon/base/file_util.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

namespace tachyon {
namespace {

std::filesystem::path file_util_test_folder(const std::string& name) {
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("tachyon_file_util_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder);
  return folder;
}

size_t file_util_entries(const std::filesystem::path& folder) {
  size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(folder)) ++count;
  return count;
}

TEST(WriteFileIfAbsent, TheFirstWriterWinsAndALaterOneLeavesTheFileAsItIs) {
  const std::filesystem::path folder = file_util_test_folder("absent");
  const std::filesystem::path path = folder / "deep" / "choices.json";
  EXPECT_TRUE(write_file_if_absent(path, "first"));
  EXPECT_FALSE(write_file_if_absent(path, "second"));
  EXPECT_EQ(read_file(path), "first");
  EXPECT_EQ(file_util_entries(path.parent_path()), 1u);  // no temporaries left behind
  std::filesystem::remove_all(folder);
}

TEST(WriteFileIfAbsent, OfManyConcurrentWritersExactlyOneLandsWhole) {
  const std::filesystem::path folder = file_util_test_folder("race");
  const std::filesystem::path path = folder / "choices.json";
  constexpr int kWriters = 8;
  std::atomic<int> winners{0}, winner{-1};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      // Large enough that an interleaved or truncated write would show.
      if (write_file_if_absent(path, std::string(1 << 20, static_cast<char>('a' + w)))) {
        ++winners;
        winner = w;
      }
    });
  }
  for (std::thread& t : writers) t.join();
  ASSERT_EQ(winners.load(), 1);
  EXPECT_EQ(read_file(path), std::string(1 << 20, static_cast<char>('a' + winner.load())));
  EXPECT_EQ(file_util_entries(folder), 1u);
  std::filesystem::remove_all(folder);
}

TEST(WriteFileAtomically, ReplacesTheFileWholeAndLeavesNoTemporary) {
  const std::filesystem::path folder = file_util_test_folder("atomic");
  const std::filesystem::path path = folder / "choices.json";
  write_file_atomically(path, "stale");
  write_file_atomically(path, "fresh");
  EXPECT_EQ(read_file(path), "fresh");
  EXPECT_EQ(file_util_entries(folder), 1u);
  std::filesystem::remove_all(folder);
}

}  // namespace
}  // namespace tachyon
