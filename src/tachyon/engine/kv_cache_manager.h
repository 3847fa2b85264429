// KvCacheManager: the block accounting of the paged KV cache. Fixed-size blocks, ref counts
// (blocks of a shared prefix are held by every sequence that uses them), and prefix caching:
// a full block is named by the chained hash of its tokens and every token before it, so a new
// sequence whose prompt starts the same way reuses the blocks instead of recomputing them.
// Cached blocks whose ref count drops to zero go to the tail of one free list and keep their hash
// until they are reused from its head: least recently freed is evicted first (LRU), and a
// sequence's blocks are freed tail first so its prefix stays cached longest. Blocks that cache
// nothing (a partial last block, trimmed lookahead slots) go to the head: they are reused before
// any cached block is evicted.
// The manager moves no KV data; it only decides which block holds which tokens.
// POOLS: the blocks may be split into equal pools, pool p owning block ids [p * B, (p + 1) * B)
// (B = blocks_per_pool()), one per data-parallel replica, each of which caches only its own
// sequences (runner/dp_cpu_model_runner.h). A block table lives in one pool: allocate() takes
// fresh blocks from the pool of the table's first block, each pool has its own free list and
// its own prefix cache (the same tokens may be cached in two pools), so a replica's K/V never
// leaves it. One pool (the default) is the plain manager.
// Tests: tests/unit/test_kv_cache_manager.cpp (randomized with invariant checks every step),
// tests/unit/test_kv_pools.cpp (pools).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace tachyon::engine {

// 128-bit chained block hash: collisions would silently mix two prompts' KV, so 64 bits is
// not enough for a cache that serves for days.
struct BlockHash {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const BlockHash&) const = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.low ^ (h.high * 0x9e3779b97f4a7c15ull)); }
};

// Extends `hashes` (the chained hashes of the first hashes.size() full blocks of `tokens`) to
// cover every full block of `tokens`. Incremental: earlier entries are kept.
void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const int32_t> tokens, int32_t block_size);

struct KvCacheStats {
  int64_t prefix_queries_tokens = 0;  // prompt tokens looked up in the prefix cache
  int64_t prefix_hit_tokens = 0;      // of those, found cached
  int64_t evictions = 0;              // cached blocks reused for other tokens
};

class KvCacheManager {
 public:
  // num_blocks in all, split into num_pools equal pools (num_pools must divide num_blocks).
  KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching, int32_t num_pools = 1);

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t num_pools() const { return static_cast<int32_t>(pools_.size()); }
  int32_t blocks_per_pool() const { return num_blocks() / num_pools(); }
  int32_t pool_of(int32_t block) const { return block / blocks_per_pool(); }
  // Blocks with no reference: never used, or freed (possibly still cached and reusable).
  int32_t num_free_blocks() const;
  int32_t num_free_blocks(int32_t pool) const { return pools_[static_cast<size_t>(pool)].num_free; }
  bool prefix_caching() const { return prefix_caching_; }
  const KvCacheStats& stats() const { return stats_; }

  // The cached blocks of `pool` that hold a prefix of a sequence with these full-block hashes
  // and `num_tokens` known tokens. At least one token is always left to compute, because the step
  // that computes it produces the logits to sample from. Counted in stats().
  std::vector<int32_t> find_cached_prefix(std::span<const BlockHash> block_hashes, int64_t num_tokens,
                                          int32_t pool = 0);
  // The same lookup, not counted in stats() (the scheduler comparing pools).
  std::vector<int32_t> cached_prefix(std::span<const BlockHash> block_hashes, int64_t num_tokens, int32_t pool) const;

  // Grows `block_table` so it holds `num_tokens` tokens: first the `cached_prefix` blocks
  // (only when the table is empty), then fresh blocks from the head of the free list of the
  // table's pool (`pool` when the table is empty). Returns false and changes nothing when that
  // pool has not enough free blocks.
  bool allocate(std::vector<int32_t>& block_table, std::span<const int32_t> cached_prefix, int64_t num_tokens,
                int32_t pool = 0);

  // Names full blocks [first_block, block_hashes.size()) of the table in the prefix cache, so
  // later sequences can reuse them. A hash already cached in another block is left alone.
  void cache_full_blocks(std::span<const int32_t> block_table, std::span<const BlockHash> block_hashes,
                         size_t first_block);

  // The hash of every block the prefix cache names (in use or free), in no order.
  std::vector<BlockHash> cached_hashes() const;

  // Drops the table's references (tail first) and clears it.
  void free(std::vector<int32_t>& block_table);

  // Adds one reference to every block of the table: a holder besides the sequence (a KV lease of
  // a prefill server, engine/kv_transfer.h) that later gives it back with free() on a copy.
  void retain(std::span<const int32_t> block_table);

  // Gives back the blocks past the first ceil(num_tokens / block_size) of the table: lookahead
  // slots of rejected draft tokens. They hold no computed (so no cached) token; each returns to
  // the head of the free list, where allocate() took it, so the free list is as if it had never
  // been handed out.
  void trim(std::vector<int32_t>& block_table, int64_t num_tokens);

  // Throws Error unless every ref count equals the number of tables holding the block, each
  // pool's free list holds exactly its unreferenced blocks, every cached hash maps to its block
  // in its pool, and no table spans two pools.
  void check_invariants(std::span<const std::vector<int32_t>* const> live_tables) const;

 private:
  struct Block {
    int32_t ref_count = 0;
    bool cached = false;  // `hash` names this block in cached_
    BlockHash hash;
    int32_t prev_free = -1;  // intrusive free list, valid while ref_count == 0
    int32_t next_free = -1;
  };

  // One pool's free list (intrusive, through Block) and prefix cache.
  struct Pool {
    int32_t free_head = -1;
    int32_t free_tail = -1;
    int32_t num_free = 0;
    std::unordered_map<BlockHash, int32_t, BlockHashHasher> cached;  // hash -> block of this pool
  };

  Pool& pool_of_block(int32_t id) { return pools_[static_cast<size_t>(pool_of(id))]; }
  void free_list_push_back(int32_t id);
  void free_list_push_front(int32_t id);
  void free_list_remove(int32_t id);
  int32_t take_free_block(int32_t pool);  // pops the head, evicting its cached hash; the caller references it
  void add_reference(int32_t id);

  int32_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<Pool> pools_;  // [num_pools]
  KvCacheStats stats_;
};

}  // namespace tachyon::engine
