// Buffers a model's load fills at once (its weights: gigabytes) asked to be backed by 2 MB pages.
// Filling fresh memory faults it in page by page; at 4 KB a page, a load spends most of its time in
// page faults on a virtual machine (the 1B shape's CPU start-up: 19-23 s in 4 KB pages, ~3 s with
// its weights and KV cache advised here; bench/results/2026-12-05-huge-page-weights-cpu.json).
// Linux's transparent huge pages in "madvise" mode (Debian's default) back a range with them only
// when asked, before its first touch: that is this. Only long-lived weight buffers ask, not the
// server's request heap, whose freed pages go back to the system (base/heap_trim.h).
#pragma once

#include <cstddef>
#include <vector>

namespace tachyon {

// Asks that the 2 MB-aligned pages inside [data, data + bytes) be huge pages; a hint, so nothing
// happens where the system does not offer them, or for ranges under 4 MB.
void advise_huge_pages(const void* data, size_t bytes);

// v.reserve(count) with the new room advised as above, before anything touches it.
template <typename T>
void reserve_huge(std::vector<T>& v, size_t count) {
  if (count <= v.capacity()) return;
  v.reserve(count);
  advise_huge_pages(v.data() + v.size(), (count - v.size()) * sizeof(T));
}

// `count` zeros in a buffer advised as above (a KV cache, a weight's room).
template <typename T>
std::vector<T> huge_vector(size_t count) {
  std::vector<T> v;
  reserve_huge(v, count);
  v.resize(count);
  return v;
}

}  // namespace tachyon
