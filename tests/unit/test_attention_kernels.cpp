// The paged attention kernel against the contiguous one (the spec), on awkward sizes: a
// sequence's keys scattered over shuffled blocks must give the same output bit for bit.
#include "tachyon/kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace tachyon::kernels::cpu {
namespace {

TEST(PagedAttention, MatchesContiguousOnScatteredBlocks) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal;
  struct Case {
    int64_t queries, first_position, heads, kv_heads, head_dim, window;
    int32_t block_size;
  };
  for (const Case& c : {Case{1, 96, 4, 2, 16, 0, 16}, Case{17, 0, 8, 1, 8, 0, 5}, Case{7, 40, 6, 3, 12, 9, 3},
                        Case{97, 3, 2, 2, 32, 0, 7}}) {
    const int64_t total = c.first_position + c.queries;
    const int64_t kv_size = c.kv_heads * c.head_dim;
    std::vector<float> q(static_cast<size_t>(c.queries * c.heads * c.head_dim));
    std::vector<float> k(static_cast<size_t>(total * kv_size)), v(k.size());
    for (auto* buffer : {&q, &k, &v}) {
      for (float& x : *buffer) x = normal(rng);
    }
    AttentionShape shape{c.queries, c.first_position, c.heads, c.kv_heads, c.head_dim, c.window,
                         1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    std::vector<float> expected(q.size(), NAN);
    attention(expected.data(), q.data(), k.data(), v.data(), shape);

    // Scatter the keys over a shuffled block table in a cache twice as large.
    const int64_t blocks_needed = (total + c.block_size - 1) / c.block_size;
    std::vector<int32_t> pool(static_cast<size_t>(2 * blocks_needed));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    std::vector<int32_t> table(pool.begin(), pool.begin() + blocks_needed);
    std::vector<float> k_cache(pool.size() * static_cast<size_t>(c.block_size * kv_size), NAN), v_cache(k_cache.size(), NAN);
    std::vector<int64_t> slots(static_cast<size_t>(total));
    for (int64_t j = 0; j < total; ++j) slots[static_cast<size_t>(j)] = int64_t{table[static_cast<size_t>(j / c.block_size)]} * c.block_size + j % c.block_size;
    store_kv_paged(k_cache.data(), v_cache.data(), k.data(), v.data(), slots.data(), total, kv_size);

    std::vector<float> got(q.size(), NAN);  // poisoned: every element must be written
    paged_attention(got.data(), q.data(), k_cache.data(), v_cache.data(), table.data(), c.block_size, shape);
    ASSERT_EQ(got, expected) << "queries " << c.queries << " block_size " << c.block_size;
  }
}

}  // namespace
}  // namespace tachyon::kernels::cpu
