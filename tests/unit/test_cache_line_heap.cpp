// The replacement operator new (tensor/cache_line_heap.h): every block of kCacheLineHeapFrom
// bytes or more, from any form of new and any container, starts on a 64-byte line; smaller ones
// still work; and where a weight lies never changes a bit of the CPU product (the same weights at
// a 16-byte offset give the same output on every instruction set this CPU runs).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "tachyon/kernels/cpu/fixed_order_gemm.h"
#include "tachyon/tensor/cache_line_heap.h"

namespace tachyon {
namespace {

TEST(CacheLineHeap, VectorsFromTheThresholdUpStartOnALine) {
  const size_t from = kCacheLineHeapFrom / sizeof(float);
  // Kept alive together, so that each comes from a different place in the heap.
  std::vector<std::vector<float>> held;
  for (size_t count : {from, from + 1, from + 3, 2 * from + 5, size_t{65536}, size_t{196608}, size_t{1} << 20}) {
    for (int copy = 0; copy < 8; ++copy) {
      held.emplace_back(count, 1.0f);
      EXPECT_TRUE(on_cache_line(held.back().data())) << count << " floats, copy " << copy;
    }
  }
  // Growth by push_back reallocates through the same operator new.
  std::vector<float> grown;
  for (size_t i = 0; i < 3 * from; ++i) grown.push_back(static_cast<float>(i));
  EXPECT_TRUE(on_cache_line(grown.data()));
}

TEST(CacheLineHeap, EveryFormOfNewAlignsLargeBlocks) {
  std::unique_ptr<float[]> array(new float[kCacheLineHeapFrom]);
  EXPECT_TRUE(on_cache_line(array.get()));
  std::unique_ptr<char[]> nothrow_array(new (std::nothrow) char[kCacheLineHeapFrom + 17]);
  ASSERT_NE(nothrow_array, nullptr);
  EXPECT_TRUE(on_cache_line(nothrow_array.get()));
  void* raw = ::operator new(kCacheLineHeapFrom);
  EXPECT_TRUE(on_cache_line(raw));
  ::operator delete(raw, kCacheLineHeapFrom);
  const std::string text(3 * kCacheLineHeapFrom, 'x');
  EXPECT_TRUE(on_cache_line(text.data()));
}

TEST(CacheLineHeap, SmallBlocksAndFailuresBehaveAsBefore) {
  std::vector<std::unique_ptr<int>> small;
  for (int i = 0; i < 1000; ++i) small.push_back(std::make_unique<int>(i));
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(*small[static_cast<size_t>(i)], i);
  std::unique_ptr<char[]> empty(new char[0]);
  EXPECT_NE(empty, nullptr);
  // More than any machine has: new throws, the nothrow form returns null.
  const size_t too_much = size_t{1} << 62;
  void* block = nullptr;
  EXPECT_THROW(block = ::operator new(too_much), std::bad_alloc);
  EXPECT_EQ(block, nullptr);
  block = ::operator new(too_much, std::nothrow);
  EXPECT_EQ(block, nullptr);
}

// The product's bits do not depend on where the weight lies: a weight at a 16-byte offset (where
// malloc used to put it) gives the output of the same weight on a cache line.
TEST(CacheLineHeap, TheProductIsTheSameAtAnyOffset) {
  using kernels::cpu::GemmIsa;
  constexpr int64_t rows = 3, in = 256, out = 97;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> x(rows * in), weight(out * in);
  for (float& v : x) v = normal(rng);
  for (float& v : weight) v = normal(rng);
  ASSERT_TRUE(on_cache_line(weight.data()));
  std::vector<float> shifted_storage(out * in + 4);
  float* shifted = shifted_storage.data() + 4;  // 16 bytes off the line
  std::memcpy(shifted, weight.data(), weight.size() * sizeof(float));
  for (GemmIsa isa : {GemmIsa::kPortable, GemmIsa::kAvx2, GemmIsa::kAvx512}) {
    if (!kernels::cpu::cpu_runs(isa)) continue;
    std::vector<float> aligned_out(rows * out), shifted_out(rows * out);
    kernels::cpu::fixed_order_gemm_columns(isa, aligned_out.data(), x.data(), weight.data(), rows, in, out, 0, out);
    kernels::cpu::fixed_order_gemm_columns(isa, shifted_out.data(), x.data(), shifted, rows, in, out, 0, out);
    EXPECT_EQ(std::memcmp(aligned_out.data(), shifted_out.data(), aligned_out.size() * sizeof(float)), 0)
        << kernels::cpu::gemm_isa_name(isa);
  }
}

}  // namespace
}  // namespace tachyon
