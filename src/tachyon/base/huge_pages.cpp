#include "tachyon/base/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace tachyon {

namespace {
constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
}  // namespace

void advise_huge_pages(const void* data, size_t bytes) {
  if (data == nullptr || bytes < 2 * kHugePage) return;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(data) + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes) & ~(kHugePage - 1);
#ifdef MADV_HUGEPAGE
  // A hint: an error (no huge pages here) changes nothing.
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#endif
}

}  // namespace tachyon
