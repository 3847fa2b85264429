// IdleHeapTrim (base/heap_trim.h): it trims only after work since its last trim, at most once per
// interval, and a trim gives back freed heap pages: 64 MiB of small chunks freed under a live one
// at the heap's top stay resident until the trim, and leave after it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tachyon/base/heap_trim.h"

namespace tachyon {
namespace {

int64_t rss_anon_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8)) * 1024;
  }
  return -1;
}

TEST(IdleHeapTrim, TrimsOnceAfterWorkAndAtMostOncePerInterval) {
  IdleHeapTrim trim(std::chrono::milliseconds(200));
  EXPECT_FALSE(trim.idle()) << "no work since start: nothing to give back";
  trim.busy();
  EXPECT_TRUE(trim.idle());
  EXPECT_FALSE(trim.idle()) << "no work since the last trim";
  trim.busy();
  EXPECT_FALSE(trim.idle()) << "within the interval of the last trim";
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_TRUE(trim.idle()) << "the work noted before stays noted until a trim happens";
}

TEST(IdleHeapTrim, GivesFreedHeapPagesBack) {
  // Through volatile pointers: the compiler may not drop an allocation whose memory is never read.
  void* (*volatile allocate)(size_t) = std::malloc;
  void (*volatile release)(void*) = std::free;
  std::vector<char*> chunks;
  for (int i = 0; i < 65536; ++i) {
    chunks.push_back(static_cast<char*>(allocate(1000)));
    std::memset(chunks.back(), i & 0xFF, 1000);  // resident
  }
  char* top = static_cast<char*>(allocate(1000));  // live above them: the heap's top cannot shrink
  for (char* chunk : chunks) release(chunk);
  const int64_t before = rss_anon_bytes();
  IdleHeapTrim trim;
  trim.busy();
  ASSERT_TRUE(trim.idle());
  const int64_t after = rss_anon_bytes();
  release(top);
  EXPECT_GT(before, int64_t{48} << 20) << "the freed chunks should still be resident before the trim";
  EXPECT_LT(after, before - (32 << 20)) << "RssAnon " << before << " -> " << after << " bytes";
}

}  // namespace
}  // namespace tachyon
