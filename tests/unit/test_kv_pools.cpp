// KV pools (engine/kv_cache_manager.h): one block pool per data-parallel replica.
//   manager    pool p hands out only ids [p * B, (p + 1) * B), has its own free list and its own
//              prefix cache, and exact accounting holds under random lifecycles in every pool;
//   scheduler  a new sequence goes to the least busy pool with room, a prefix hit to the pool
//              caching the prefix, a sequence short of blocks preempts only in its own pool, and
//              two pools hold twice the sequences one pool of the same size holds.
// The engine and model side is in test_dp_families.cpp.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <random>

#include "tachyon/base/check.h"
#include "tachyon/engine/kv_cache_manager.h"
#include "tachyon/engine/scheduler.h"

namespace tachyon::engine {
namespace {

std::vector<BlockHash> pool_hashes(const std::vector<int32_t>& tokens, int32_t block_size) {
  std::vector<BlockHash> hashes;
  extend_block_hashes(hashes, tokens, block_size);
  return hashes;
}

TEST(KvPools, EachPoolHandsOutItsOwnIds) {
  KvCacheManager kv(12, 4, true, 3);  // pools of 4 blocks: [0, 4), [4, 8), [8, 12)
  EXPECT_EQ(kv.num_pools(), 3);
  EXPECT_EQ(kv.blocks_per_pool(), 4);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(kv.allocate(a, {}, 12, 1));  // 3 blocks of pool 1
  for (int32_t id : a) EXPECT_EQ(kv.pool_of(id), 1) << id;
  EXPECT_EQ(kv.num_free_blocks(1), 1);
  EXPECT_EQ(kv.num_free_blocks(), 9);
  EXPECT_FALSE(kv.allocate(a, {}, 20));  // a 5th block: pool 1 is out, the others do not count
  EXPECT_EQ(a.size(), 3u);
  ASSERT_TRUE(kv.allocate(a, {}, 16));  // grows in its own pool
  EXPECT_EQ(kv.pool_of(a.back()), 1);
  ASSERT_TRUE(kv.allocate(b, {}, 16, 2));
  for (int32_t id : b) EXPECT_EQ(kv.pool_of(id), 2) << id;
  std::vector<const std::vector<int32_t>*> live = {&a, &b};
  kv.check_invariants(live);
  kv.free(a);
  EXPECT_EQ(kv.num_free_blocks(1), 4);
  EXPECT_THROW(KvCacheManager(10, 4, true, 3), Error);  // pools must be equal
}

TEST(KvPools, PrefixCacheIsPerPool) {
  KvCacheManager kv(8, 4, true, 2);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const auto hashes = pool_hashes(tokens, 4);
  std::vector<int32_t> first;
  ASSERT_TRUE(kv.allocate(first, {}, 9, 1));
  kv.cache_full_blocks(first, hashes, 0);
  EXPECT_EQ(kv.cached_prefix(hashes, 9, 1).size(), 2u);
  EXPECT_TRUE(kv.cached_prefix(hashes, 9, 0).empty());  // pool 0 never computed them
  EXPECT_EQ(kv.stats().prefix_queries_tokens, 0);        // cached_prefix is not counted
  std::vector<int32_t> second;
  EXPECT_THROW(kv.allocate(second, kv.cached_prefix(hashes, 9, 1), 9, 0), Error);  // another pool's blocks
  ASSERT_TRUE(kv.allocate(second, kv.find_cached_prefix(hashes, 9, 1), 9, 1));
  EXPECT_EQ(second[0], first[0]);
  EXPECT_EQ(kv.stats().prefix_hit_tokens, 8);
  // The same tokens computed in pool 0 too: both pools cache them.
  std::vector<int32_t> third;
  ASSERT_TRUE(kv.allocate(third, {}, 9, 0));
  kv.cache_full_blocks(third, hashes, 0);
  EXPECT_EQ(kv.cached_prefix(hashes, 9, 0).size(), 2u);
  std::vector<const std::vector<int32_t>*> live = {&first, &second, &third};
  kv.check_invariants(live);
}

// Random allocate / grow / free / prefix-hit runs over 3 pools, invariants after every operation.
TEST(KvPools, RandomLifecyclesKeepExactAccountingPerPool) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const int32_t pools = 3, block_size = 4, num_blocks = pools * 6;
    KvCacheManager kv(num_blocks, block_size, true, pools);
    struct Seq {
      std::vector<int32_t> tokens, table;
      std::vector<BlockHash> hashes;
    };
    std::vector<Seq> live;
    for (int op = 0; op < 300; ++op) {
      const int kind = static_cast<int>(rng() % 3);
      if (kind == 0 || live.empty()) {
        Seq s;
        const int length = 1 + static_cast<int>(rng() % 14);
        const int32_t family = static_cast<int32_t>(rng() % 3);  // shared prefixes
        for (int i = 0; i < length; ++i) s.tokens.push_back(i < 8 ? family * 100 + i : static_cast<int32_t>(rng() % 50));
        s.hashes = pool_hashes(s.tokens, block_size);
        const int32_t pool = static_cast<int32_t>(rng() % pools);
        auto hits = kv.find_cached_prefix(s.hashes, static_cast<int64_t>(s.tokens.size()), pool);
        if (kv.allocate(s.table, hits, static_cast<int64_t>(s.tokens.size()), pool)) {
          for (int32_t id : s.table) ASSERT_EQ(kv.pool_of(id), pool);
          kv.cache_full_blocks(s.table, s.hashes, 0);
          live.push_back(std::move(s));
        }
      } else if (kind == 1) {
        Seq& s = live[rng() % live.size()];
        const int32_t pool = kv.pool_of(s.table.front());
        if (kv.allocate(s.table, {}, static_cast<int64_t>(s.tokens.size()) + 1)) {
          s.tokens.push_back(static_cast<int32_t>(rng() % 50));
          EXPECT_EQ(kv.pool_of(s.table.back()), pool);
        }
      } else {
        const size_t i = rng() % live.size();
        kv.free(live[i].table);
        live.erase(live.begin() + static_cast<int64_t>(i));
      }
      std::vector<const std::vector<int32_t>*> tables;
      for (const Seq& s : live) tables.push_back(&s.table);
      ASSERT_NO_THROW(kv.check_invariants(tables)) << "trial " << trial << " op " << op;
    }
    for (Seq& s : live) kv.free(s.table);
    ASSERT_EQ(kv.num_free_blocks(), num_blocks);
  }
}

// ---------------------------------------------------------------------------------------------
// The scheduler over pools, with fake sampled tokens.

class PoolSchedulerTest : public ::testing::Test {
 protected:
  void make(core::SchedulerConfig config, int32_t num_blocks, int32_t pools, int32_t block_size = 4) {
    kv_ = std::make_unique<KvCacheManager>(num_blocks, block_size, true, pools);
    scheduler_ = std::make_unique<Scheduler>(config, *kv_);
  }

  Sequence* add(int prompt_len, int max_tokens = 16, int first_token = 0) {
    auto s = std::make_unique<Sequence>();
    s->id = static_cast<int64_t>(sequences_.size());
    s->arrival = s->id;
    core::SamplingParams params;
    params.max_tokens = max_tokens;
    params.ignore_eos = true;
    s->params = std::make_shared<const core::SamplingParams>(params);
    s->tokens.resize(static_cast<size_t>(prompt_len));
    std::iota(s->tokens.begin(), s->tokens.end(), first_token);
    s->num_prompt_tokens = prompt_len;
    scheduler_->add(s.get());
    sequences_.push_back(std::move(s));
    return sequences_.back().get();
  }

  core::StepPlan step() {
    core::StepPlan plan = scheduler_->schedule();
    std::vector<int32_t> sampled(plan.logits_rows.size(), 7);
    scheduler_->update(plan, sampled);
    std::vector<const std::vector<int32_t>*> tables;
    for (const auto& s : sequences_) {
      if (!s->finished()) tables.push_back(&s->block_table);
    }
    kv_->check_invariants(tables);
    return plan;
  }

  int32_t pool(const Sequence* s) const { return kv_->pool_of(s->block_table.front()); }

  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Sequence>> sequences_;
};

TEST_F(PoolSchedulerTest, NewSequencesGoToTheLeastBusyPool) {
  make({.max_num_batched_tokens = 256, .max_model_len = 64}, 64, 2);
  std::vector<Sequence*> s;
  for (int i = 0; i < 4; ++i) s.push_back(add(5, 16, 100 * i));
  step();
  EXPECT_EQ(pool(s[0]), 0);
  EXPECT_EQ(pool(s[1]), 1);
  EXPECT_EQ(pool(s[2]), 0);
  EXPECT_EQ(pool(s[3]), 1);
}

TEST_F(PoolSchedulerTest, PrefixHitsGoToThePoolCachingThePrefix) {
  make({.max_num_batched_tokens = 256, .max_model_len = 64}, 64, 2);
  Sequence* owner = add(9);  // pool 0: computes tokens 0..8, two full blocks cached there
  Sequence* x = add(13, 16, 500);  // pool 1, 4 blocks
  Sequence* z = add(3, 16, 900);   // one each: pool 0, which has more free blocks (29 to 28)
  step();
  ASSERT_EQ(pool(owner), 0);
  ASSERT_EQ(pool(x), 1);
  ASSERT_EQ(pool(z), 0);               // pool 0 now runs two sequences, pool 1 one
  Sequence* sharer = add(11);          // tokens 0..10: its first two blocks are cached in pool 0
  step();
  EXPECT_EQ(pool(sharer), 0);          // the busier pool, where its prefix is
  EXPECT_EQ(sharer->num_prefix_hit_tokens, 8);
  EXPECT_EQ(sharer->block_table[0], owner->block_table[0]);
}

TEST_F(PoolSchedulerTest, PreemptionStaysInThePool) {
  // Pools of 4 blocks of 4 tokens. Pool 0: a, then c over a's cached first block; pool 1: b, the
  // latest arrival. When pool 0 runs out the victim is c, never b: b is the latest, but its blocks
  // are in the other pool and would free none for a or c.
  make({.max_num_batched_tokens = 256, .max_model_len = 16}, 8, 2);
  Sequence* a = add(7, 9, 0);
  step();
  Sequence* c = add(5, 9, 0);  // tokens 0..4: a's first block
  Sequence* b = add(7, 9, 100);
  step();
  ASSERT_EQ(pool(a), 0);
  ASSERT_EQ(pool(c), 0);
  ASSERT_EQ(pool(b), 1);
  bool c_preempted = false;
  for (int i = 0; i < 12 && !a->finished(); ++i) {
    const core::StepPlan plan = step();
    for (int64_t id : plan.preempted) {
      EXPECT_EQ(id, c->id) << "step " << i;
      c_preempted = true;
    }
  }
  EXPECT_TRUE(c_preempted);
  EXPECT_EQ(b->num_preemptions, 0);
}

// At the same blocks per pool, two pools run twice the sequences one pool runs.
TEST_F(PoolSchedulerTest, TwoPoolsHoldTwiceTheSequences) {
  for (int32_t pools : {1, 2}) {
    SCOPED_TRACE(pools);
    sequences_.clear();
    make({.max_num_batched_tokens = 256, .max_model_len = 32}, 8 * pools, pools);  // 8 blocks per pool
    for (int i = 0; i < 4; ++i) add(13, 2, 100 * i);  // 4 blocks each: two fit one pool
    step();
    EXPECT_EQ(scheduler_->num_running(), 2 * pools);
    EXPECT_EQ(scheduler_->num_waiting(), 4 - 2 * pools);
  }
}

}  // namespace
}  // namespace tachyon::engine
