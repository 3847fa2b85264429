// KvCacheManager: prefix hits, LRU eviction, and exact accounting under thousands of random
// add / grow / finish / abort / preempt sequences with the invariants checked after every step.
#include "tachyon/engine/kv_cache_manager.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "tachyon/base/check.h"

namespace tachyon::engine {

namespace {

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

std::vector<BlockHash> hashes_of(const std::vector<int32_t>& tokens, int32_t block_size) {
  std::vector<BlockHash> h;
  extend_block_hashes(h, tokens, block_size);
  return h;
}

TEST(BlockHashes, ChainedAndIncremental) {
  auto tokens = iota_tokens(40);
  auto all = hashes_of(tokens, 16);
  ASSERT_EQ(all.size(), 2u);  // 40 tokens: two full blocks
  std::vector<BlockHash> incremental;
  extend_block_hashes(incremental, std::span(tokens).first(20), 16);
  extend_block_hashes(incremental, tokens, 16);
  EXPECT_EQ(incremental, all);
  // The same 16 tokens after a different first block hash differently (the chain).
  std::vector<int32_t> other = iota_tokens(16, 100);
  other.insert(other.end(), tokens.begin() + 16, tokens.begin() + 32);
  EXPECT_NE(hashes_of(other, 16)[1], all[1]);
}

TEST(KvCacheManager, AllocatesAndFrees) {
  KvCacheManager kv(10, 16, true);
  std::vector<int32_t> table;
  ASSERT_TRUE(kv.allocate(table, {}, 33));  // 3 blocks
  EXPECT_EQ(table.size(), 3u);
  EXPECT_EQ(kv.num_free_blocks(), 7);
  ASSERT_TRUE(kv.allocate(table, {}, 48));  // still 3
  EXPECT_EQ(table.size(), 3u);
  EXPECT_FALSE(kv.allocate(table, {}, 16 * 11));  // would need 11 > 10
  EXPECT_EQ(table.size(), 3u);                     // unchanged on failure
  kv.free(table);
  EXPECT_TRUE(table.empty());
  EXPECT_EQ(kv.num_free_blocks(), 10);
}

TEST(KvCacheManager, SharedPrefixIsReused) {
  KvCacheManager kv(20, 4, true);
  auto prompt = iota_tokens(10);  // 2 full blocks + 2 tokens
  auto hashes = hashes_of(prompt, 4);
  std::vector<int32_t> first;
  EXPECT_TRUE(kv.find_cached_prefix(hashes, 10).empty());
  ASSERT_TRUE(kv.allocate(first, {}, 10));
  kv.cache_full_blocks(first, hashes, 0);

  auto hits = kv.find_cached_prefix(hashes, 10);
  ASSERT_EQ(hits.size(), 2u);
  EXPECT_EQ(hits[0], first[0]);
  std::vector<int32_t> second;
  ASSERT_TRUE(kv.allocate(second, hits, 10));
  EXPECT_EQ(second[0], first[0]);
  EXPECT_NE(second[2], first[2]);  // the partial block is private
  const std::vector<int32_t>* tables[] = {&first, &second};
  kv.check_invariants(tables);

  // A prompt that is exactly the cached blocks still leaves its last token to compute.
  auto exact = iota_tokens(8);
  EXPECT_EQ(kv.find_cached_prefix(hashes_of(exact, 4), 8).size(), 1u);
}

TEST(KvCacheManager, FreedBlocksStayCachedUntilEvictedLeastRecentFirst) {
  KvCacheManager kv(4, 4, true);
  auto a = iota_tokens(9, 0), b = iota_tokens(9, 1000);
  auto ha = hashes_of(a, 4), hb = hashes_of(b, 4);
  std::vector<int32_t> ta, tb;
  ASSERT_TRUE(kv.allocate(ta, {}, 8));
  kv.cache_full_blocks(ta, ha, 0);
  kv.free(ta);
  ASSERT_TRUE(kv.allocate(tb, {}, 8));
  kv.cache_full_blocks(tb, hb, 0);
  kv.free(tb);
  EXPECT_EQ(kv.num_free_blocks(), 4);
  EXPECT_EQ(kv.find_cached_prefix(ha, 9).size(), 2u);
  EXPECT_EQ(kv.find_cached_prefix(hb, 9).size(), 2u);
  // Taking two fresh blocks evicts a's blocks (freed first), tail block first; b stays.
  std::vector<int32_t> tc;
  ASSERT_TRUE(kv.allocate(tc, {}, 8));
  EXPECT_EQ(kv.stats().evictions, 2);
  EXPECT_TRUE(kv.find_cached_prefix(ha, 9).empty());
  EXPECT_EQ(kv.find_cached_prefix(hb, 9).size(), 2u);
}

// A freed block that caches nothing (a sequence's partial last block) is reused before any
// cached block is evicted: it goes to the head of the free list, not behind the cached ones.
TEST(KvCacheManager, UncachedFreeBlocksAreTakenBeforeACachedBlockIsEvicted) {
  KvCacheManager kv(3, 4, true);
  auto a = iota_tokens(9), b = iota_tokens(2, 500);
  auto ha = hashes_of(a, 4);
  std::vector<int32_t> ta, tb, tc;
  ASSERT_TRUE(kv.allocate(ta, {}, 8));  // a's two full blocks, cached
  kv.cache_full_blocks(ta, ha, 0);
  ASSERT_TRUE(kv.allocate(tb, {}, 2));  // b's partial block, nothing to cache
  kv.free(ta);
  kv.free(tb);  // freed last, but it holds nothing another prompt could reuse
  ASSERT_TRUE(kv.allocate(tc, {}, 3));
  EXPECT_EQ(tc, std::vector<int32_t>{2});  // b's block
  EXPECT_EQ(kv.stats().evictions, 0);
  EXPECT_EQ(kv.find_cached_prefix(ha, 9).size(), 2u) << "a's prefix lost a block to a fresh allocation";
}

TEST(KvCacheManager, CapacityCountsRevivedCachedBlocks) {
  KvCacheManager kv(3, 4, true);
  auto a = iota_tokens(9);
  auto ha = hashes_of(a, 4);
  std::vector<int32_t> ta;
  ASSERT_TRUE(kv.allocate(ta, {}, 8));
  kv.cache_full_blocks(ta, ha, 0);
  kv.free(ta);
  auto hits = kv.find_cached_prefix(ha, 9);
  ASSERT_EQ(hits.size(), 2u);
  std::vector<int32_t> t;
  // 2 revived + 2 fresh = 4 > 3 free: must refuse without touching anything.
  EXPECT_FALSE(kv.allocate(t, hits, 13));
  EXPECT_EQ(kv.num_free_blocks(), 3);
  EXPECT_TRUE(kv.allocate(t, hits, 9));
  EXPECT_EQ(kv.num_free_blocks(), 0);
}

TEST(KvCacheManager, DoubleFreeIsCaught) {
  KvCacheManager kv(2, 4, false);
  std::vector<int32_t> t;
  ASSERT_TRUE(kv.allocate(t, {}, 4));
  std::vector<int32_t> copy = t;
  kv.free(t);
  EXPECT_THROW(kv.free(copy), Error);
}

// Random lifecycles: sequences share prompt prefixes drawn from a few stems, grow token by
// token, and end by finishing, aborting or being preempted (freed and later re-added).
TEST(KvCacheManager, RandomLifecyclesKeepExactAccounting) {
  struct Seq {
    std::vector<int32_t> tokens;
    std::vector<BlockHash> hashes;
    std::vector<int32_t> table;
    size_t cached_blocks = 0;
  };
  for (int trial = 0; trial < 2000; ++trial) {
    std::mt19937 rng(static_cast<uint32_t>(trial));
    const int32_t block_size = 1 + static_cast<int32_t>(rng() % 8);
    const int32_t num_blocks = 4 + static_cast<int32_t>(rng() % 40);
    KvCacheManager kv(num_blocks, block_size, rng() % 4 != 0);
    std::vector<std::vector<int32_t>> stems;
    for (int s = 0; s < 3; ++s) stems.push_back(iota_tokens(1 + static_cast<int>(rng() % 30), s * 1000));
    std::vector<Seq> live;
    for (int op = 0; op < 60; ++op) {
      switch (rng() % 4) {
        case 0: {  // add a sequence with a shared stem and a private tail
          Seq seq;
          seq.tokens = stems[rng() % stems.size()];
          for (int i = 0, n = static_cast<int>(rng() % 10); i < n; ++i) seq.tokens.push_back(static_cast<int32_t>(rng() % 50));
          extend_block_hashes(seq.hashes, seq.tokens, block_size);
          auto hits = kv.find_cached_prefix(seq.hashes, static_cast<int64_t>(seq.tokens.size()));
          if (kv.allocate(seq.table, hits, static_cast<int64_t>(seq.tokens.size()))) {
            kv.cache_full_blocks(seq.table, seq.hashes, 0);
            seq.cached_blocks = seq.hashes.size();
            live.push_back(std::move(seq));
          }
          break;
        }
        case 1: {  // grow one sequence by a token (decode)
          if (live.empty()) break;
          Seq& seq = live[rng() % live.size()];
          if (!kv.allocate(seq.table, {}, static_cast<int64_t>(seq.tokens.size()) + 1)) break;
          seq.tokens.push_back(static_cast<int32_t>(rng() % 50));
          extend_block_hashes(seq.hashes, seq.tokens, block_size);
          kv.cache_full_blocks(seq.table, seq.hashes, seq.cached_blocks);
          seq.cached_blocks = seq.hashes.size();
          break;
        }
        default: {  // finish, abort or preempt: all free the table
          if (live.empty()) break;
          size_t victim = rng() % live.size();
          kv.free(live[victim].table);
          live.erase(live.begin() + static_cast<long>(victim));
          break;
        }
      }
      std::vector<const std::vector<int32_t>*> tables;
      for (const Seq& s : live) tables.push_back(&s.table);
      ASSERT_NO_THROW(kv.check_invariants(tables)) << "trial " << trial << " op " << op;
    }
    for (Seq& s : live) kv.free(s.table);
    ASSERT_EQ(kv.num_free_blocks(), num_blocks) << "trial " << trial;
    kv.check_invariants({});
  }
}

}  // namespace
}  // namespace tachyon::engine
