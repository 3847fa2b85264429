// The replacement global operator new and delete (cache_line_heap.h says why). Every form
// allocates from the C heap and every delete is free(): glibc's free() takes a block from
// posix_memalign as it takes one from malloc, so a block from this new released by a library's
// own operator delete (or the reverse) is still freed correctly. The over-aligned forms
// (std::align_val_t) are libstdc++'s, which also end in free().
#include "tachyon/tensor/cache_line_heap.h"

#include <cstdlib>
#include <new>

namespace {

void* allocate(std::size_t size) {
  if (size < tachyon::kCacheLineHeapFrom) return std::malloc(size == 0 ? 1 : size);
  void* p = nullptr;
  return posix_memalign(&p, tachyon::kCacheLineBytes, size) == 0 ? p : nullptr;
}

// What the standard asks of operator new when memory runs out: call the new-handler until it
// gives up, then throw.
void* allocate_or_throw(std::size_t size) {
  for (;;) {
    if (void* p = allocate(size)) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

void* allocate_or_null(std::size_t size) noexcept {
  try {
    return allocate_or_throw(size);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

void* operator new(std::size_t size) { return allocate_or_throw(size); }
void* operator new[](std::size_t size) { return allocate_or_throw(size); }
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return allocate_or_null(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return allocate_or_null(size); }

void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
