// base/huge_pages.h: the helpers keep their vectors' contents (zeros from huge_vector, the elements
// already there through reserve_huge) for every size around the advice's thresholds, advise
// nothing they should not (ranges under 4 MB, null), and, where the system offers transparent
// huge pages on request, a 64 MB buffer is backed by them (its mapping's AnonHugePages in
// /proc/self/smaps): the fault-per-4-KB cost a model's load avoids.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tachyon/base/huge_pages.h"

namespace tachyon {
namespace {

TEST(HugePages, HelpersKeepTheContents) {
  for (const size_t count : {size_t{0}, size_t{1}, size_t{1} << 19, (size_t{1} << 20) + 3, size_t{3} << 20}) {
    const std::vector<float> zeros = huge_vector<float>(count);
    ASSERT_EQ(zeros.size(), count);
    size_t nonzero = 0;
    for (float v : zeros) nonzero += v != 0.0f ? 1 : 0;
    EXPECT_EQ(nonzero, 0u) << count;
    std::vector<uint16_t> grown(1000);
    for (size_t i = 0; i < grown.size(); ++i) grown[i] = static_cast<uint16_t>(i * 7);
    reserve_huge(grown, grown.size() + count);
    EXPECT_GE(grown.capacity(), 1000 + count);
    ASSERT_EQ(grown.size(), 1000u);
    for (size_t i = 0; i < grown.size(); ++i) ASSERT_EQ(grown[i], static_cast<uint16_t>(i * 7)) << i;
  }
  advise_huge_pages(nullptr, size_t{1} << 30);  // nothing to advise: no effect, no fault
  std::vector<char> small(4096);
  advise_huge_pages(small.data(), small.size());
}

// "[madvise]" or "[always]" in the kernel's setting: huge pages are offered on request.
bool huge_pages_on_request() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(in, line);
  return line.find("[madvise]") != std::string::npos || line.find("[always]") != std::string::npos;
}

// The AnonHugePages (kB) of the mapping that holds `address`.
int64_t anon_huge_kb_at(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto at = reinterpret_cast<uintptr_t>(address);
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (line.find('-') != std::string::npos && (head >> std::hex >> begin >> dash >> end) && dash == '-') {
      inside = begin <= at && at < end;
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stoll(line.substr(14));
  }
  return -1;
}

TEST(HugePages, ALargeBufferIsBackedByThemWhereOffered) {
  if (!huge_pages_on_request()) {
    GTEST_SKIP() << "this kernel offers no transparent huge pages on request (/sys/kernel/mm/transparent_hugepage)";
  }
  const std::vector<float> buffer = huge_vector<float>(size_t{16} << 20);  // 64 MB
  const int64_t kb = anon_huge_kb_at(buffer.data() + buffer.size() / 2);
  EXPECT_GT(kb, 0) << "no huge page behind a 64 MB buffer advised before its first touch";
}

}  // namespace
}  // namespace tachyon
