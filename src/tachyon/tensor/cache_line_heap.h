// Every heap block of kCacheLineHeapFrom bytes or more starts on a 64-byte cache line:
// cache_line_heap.cpp replaces the global operator new of every binary that links the library.
// Why: the CPU products read each weight row with 64-byte AVX-512 loads (kernels/cpu/
// fixed_order_gemm_avx512.cpp), and malloc leaves a block 16 bytes off a line, so every load of
// a row whose length is a multiple of 16 floats spans two lines (a decode GEMV of the canary's
// layers: 411 us at a 16-byte offset, 226 us aligned). The weights, the KV cache and the
// activations are std::vector<float>, whose std::allocator asks operator new for 16 bytes of
// alignment only; replacing operator new aligns them all without a second vector type in every
// signature that takes a weight. Small blocks (strings, map nodes) keep malloc's alignment,
// which they need no more of. Only where data lands changes, never a value.
// Test: tests/unit/test_cache_line_heap.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tachyon {

inline constexpr size_t kCacheLineBytes = 64;
// The smallest block that operator new puts on a cache line: one row of a small model's
// activations (256 floats) and up.
inline constexpr size_t kCacheLineHeapFrom = 1024;

inline bool on_cache_line(const void* p) { return reinterpret_cast<uintptr_t>(p) % kCacheLineBytes == 0; }

}  // namespace tachyon
