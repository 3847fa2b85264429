#include "tachyon/engine/kv_cache_manager.h"

#include <xxhash.h>

#include <cstring>

#include "tachyon/base/check.h"

namespace tachyon::engine {

void extend_block_hashes(std::vector<BlockHash>& hashes, std::span<const int32_t> tokens, int32_t block_size) {
  const size_t full_blocks = tokens.size() / static_cast<size_t>(block_size);
  std::vector<std::byte> buffer(sizeof(BlockHash) + sizeof(int32_t) * static_cast<size_t>(block_size));
  for (size_t b = hashes.size(); b < full_blocks; ++b) {
    BlockHash parent = b == 0 ? BlockHash{} : hashes[b - 1];
    std::memcpy(buffer.data(), &parent, sizeof(parent));
    std::memcpy(buffer.data() + sizeof(parent), tokens.data() + b * static_cast<size_t>(block_size),
                sizeof(int32_t) * static_cast<size_t>(block_size));
    XXH128_hash_t h = XXH3_128bits(buffer.data(), buffer.size());
    hashes.push_back({h.low64, h.high64});
  }
}

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching, int32_t num_pools)
    : block_size_(block_size),
      prefix_caching_(enable_prefix_caching),
      blocks_(static_cast<size_t>(std::max(num_blocks, 0))),
      pools_(static_cast<size_t>(std::max(num_pools, 1))) {
  TACHYON_CHECK(num_blocks > 0 && block_size > 0) << "KV cache needs blocks: num_blocks " << num_blocks
                                                  << ", block_size " << block_size;
  TACHYON_CHECK(num_pools >= 1 && num_blocks % num_pools == 0)
      << "KV cache of " << num_blocks << " blocks cannot be split into " << num_pools << " equal pools";
  for (int32_t id = 0; id < num_blocks; ++id) free_list_push_back(id);
}

int32_t KvCacheManager::num_free_blocks() const {
  int32_t free = 0;
  for (const Pool& pool : pools_) free += pool.num_free;
  return free;
}

std::vector<BlockHash> KvCacheManager::cached_hashes() const {
  std::vector<BlockHash> hashes;
  for (const Pool& pool : pools_) {
    for (const auto& [hash, block] : pool.cached) hashes.push_back(hash);
  }
  return hashes;
}

std::vector<int32_t> KvCacheManager::cached_prefix(std::span<const BlockHash> block_hashes, int64_t num_tokens,
                                                   int32_t pool) const {
  TACHYON_CHECK(pool >= 0 && pool < num_pools()) << "KV pool " << pool << " of " << num_pools();
  std::vector<int32_t> hits;
  if (!prefix_caching_) return hits;
  const auto& cached = pools_[static_cast<size_t>(pool)].cached;
  const int64_t max_blocks = (num_tokens - 1) / block_size_;  // leave >= 1 token to compute
  for (int64_t b = 0; b < max_blocks && b < static_cast<int64_t>(block_hashes.size()); ++b) {
    auto it = cached.find(block_hashes[static_cast<size_t>(b)]);
    if (it == cached.end()) break;
    hits.push_back(it->second);
  }
  return hits;
}

std::vector<int32_t> KvCacheManager::find_cached_prefix(std::span<const BlockHash> block_hashes, int64_t num_tokens,
                                                        int32_t pool) {
  std::vector<int32_t> hits = cached_prefix(block_hashes, num_tokens, pool);
  if (!prefix_caching_) return hits;
  stats_.prefix_queries_tokens += num_tokens;
  stats_.prefix_hit_tokens += static_cast<int64_t>(hits.size()) * block_size_;
  return hits;
}

bool KvCacheManager::allocate(std::vector<int32_t>& block_table, std::span<const int32_t> cached_prefix,
                              int64_t num_tokens, int32_t pool) {
  TACHYON_CHECK(cached_prefix.empty() || block_table.empty()) << "a cached prefix can only start a block table";
  if (!block_table.empty()) pool = pool_of(block_table.front());
  TACHYON_CHECK(pool >= 0 && pool < num_pools()) << "KV pool " << pool << " of " << num_pools();
  for (int32_t id : cached_prefix) {
    TACHYON_CHECK(pool_of(id) == pool) << "internal: cached block " << id << " of KV pool " << pool_of(id)
                                       << " offered to a table of pool " << pool;
  }
  const int64_t needed_total = (num_tokens + block_size_ - 1) / block_size_;
  const int64_t have = static_cast<int64_t>(block_table.size() + cached_prefix.size());
  const int64_t fresh = std::max<int64_t>(0, needed_total - have);
  int64_t revived = 0;  // cached blocks that leave the free list when taken
  for (int32_t id : cached_prefix) revived += blocks_[static_cast<size_t>(id)].ref_count == 0;
  if (fresh + revived > num_free_blocks(pool)) return false;
  for (int32_t id : cached_prefix) {
    add_reference(id);
    block_table.push_back(id);
  }
  for (int64_t i = 0; i < fresh; ++i) {
    int32_t id = take_free_block(pool);
    blocks_[static_cast<size_t>(id)].ref_count = 1;
    block_table.push_back(id);
  }
  return true;
}

void KvCacheManager::cache_full_blocks(std::span<const int32_t> block_table, std::span<const BlockHash> block_hashes,
                                       size_t first_block) {
  if (!prefix_caching_) return;
  TACHYON_CHECK(block_hashes.size() <= block_table.size())
      << "more full-block hashes (" << block_hashes.size() << ") than blocks (" << block_table.size() << ")";
  for (size_t b = first_block; b < block_hashes.size(); ++b) {
    Block& block = blocks_[static_cast<size_t>(block_table[b])];
    if (block.cached) continue;
    auto [it, inserted] = pool_of_block(block_table[b]).cached.emplace(block_hashes[b], block_table[b]);
    if (!inserted) continue;  // the same tokens were computed in another block first
    block.cached = true;
    block.hash = block_hashes[b];
  }
}

void KvCacheManager::free(std::vector<int32_t>& block_table) {
  for (auto it = block_table.rbegin(); it != block_table.rend(); ++it) {
    Block& block = blocks_[static_cast<size_t>(*it)];
    TACHYON_CHECK(block.ref_count > 0) << "double free of KV block " << *it;
    if (--block.ref_count > 0) continue;
    // A cached block joins the tail (evicted least recently freed first); one that caches
    // nothing (a partial last block) goes to the head, so it is reused before any cached block
    // is evicted.
    if (block.cached) {
      free_list_push_back(*it);
    } else {
      free_list_push_front(*it);
    }
  }
  block_table.clear();
}

void KvCacheManager::retain(std::span<const int32_t> block_table) {
  for (int32_t id : block_table) {
    TACHYON_CHECK(id >= 0 && id < num_blocks() && blocks_[static_cast<size_t>(id)].ref_count > 0)
        << "internal: retaining KV block " << id << ", which no table holds";
    add_reference(id);
  }
}

void KvCacheManager::trim(std::vector<int32_t>& block_table, int64_t num_tokens) {
  const size_t keep = static_cast<size_t>((num_tokens + block_size_ - 1) / block_size_);
  while (block_table.size() > keep) {
    const int32_t id = block_table.back();
    Block& block = blocks_[static_cast<size_t>(id)];
    TACHYON_CHECK(block.ref_count == 1 && !block.cached)
        << "internal: trimmed KV block " << id << " is shared or cached (ref count " << block.ref_count << ")";
    block.ref_count = 0;
    free_list_push_front(id);
    block_table.pop_back();
  }
}

void KvCacheManager::add_reference(int32_t id) {
  Block& block = blocks_[static_cast<size_t>(id)];
  if (block.ref_count == 0) free_list_remove(id);
  ++block.ref_count;
}

int32_t KvCacheManager::take_free_block(int32_t pool) {
  Pool& from = pools_[static_cast<size_t>(pool)];
  TACHYON_CHECK(from.free_head >= 0) << "no free KV block in pool " << pool << " (the caller must check capacity first)";
  int32_t id = from.free_head;
  free_list_remove(id);
  Block& block = blocks_[static_cast<size_t>(id)];
  if (block.cached) {
    from.cached.erase(block.hash);
    block.cached = false;
    ++stats_.evictions;
  }
  return id;
}

void KvCacheManager::free_list_push_back(int32_t id) {
  Pool& pool = pool_of_block(id);
  Block& block = blocks_[static_cast<size_t>(id)];
  block.prev_free = pool.free_tail;
  block.next_free = -1;
  if (pool.free_tail >= 0) blocks_[static_cast<size_t>(pool.free_tail)].next_free = id;
  else pool.free_head = id;
  pool.free_tail = id;
  ++pool.num_free;
}

void KvCacheManager::free_list_push_front(int32_t id) {
  Pool& pool = pool_of_block(id);
  Block& block = blocks_[static_cast<size_t>(id)];
  block.prev_free = -1;
  block.next_free = pool.free_head;
  if (pool.free_head >= 0) blocks_[static_cast<size_t>(pool.free_head)].prev_free = id;
  else pool.free_tail = id;
  pool.free_head = id;
  ++pool.num_free;
}

void KvCacheManager::free_list_remove(int32_t id) {
  Pool& pool = pool_of_block(id);
  Block& block = blocks_[static_cast<size_t>(id)];
  if (block.prev_free >= 0) blocks_[static_cast<size_t>(block.prev_free)].next_free = block.next_free;
  else pool.free_head = block.next_free;
  if (block.next_free >= 0) blocks_[static_cast<size_t>(block.next_free)].prev_free = block.prev_free;
  else pool.free_tail = block.prev_free;
  block.prev_free = block.next_free = -1;
  --pool.num_free;
}

void KvCacheManager::check_invariants(std::span<const std::vector<int32_t>* const> live_tables) const {
  std::vector<int32_t> expected_refs(blocks_.size(), 0);
  for (const auto* table : live_tables) {
    for (int32_t id : *table) {
      TACHYON_CHECK(id >= 0 && id < num_blocks()) << "block id " << id << " out of range";
      TACHYON_CHECK(pool_of(id) == pool_of(table->front()))
          << "a block table spans KV pools " << pool_of(table->front()) << " and " << pool_of(id);
      ++expected_refs[static_cast<size_t>(id)];
    }
  }
  std::vector<int32_t> unreferenced(pools_.size(), 0);  // [num_pools]
  for (size_t id = 0; id < blocks_.size(); ++id) {
    TACHYON_CHECK(blocks_[id].ref_count == expected_refs[id])
        << "block " << id << " has ref_count " << blocks_[id].ref_count << " but " << expected_refs[id]
        << " tables hold it";
    unreferenced[static_cast<size_t>(pool_of(static_cast<int32_t>(id)))] += blocks_[id].ref_count == 0;
  }
  for (size_t p = 0; p < pools_.size(); ++p) {
    const Pool& pool = pools_[p];
    int32_t walked = 0;
    for (int32_t id = pool.free_head, prev = -1; id >= 0; prev = id, id = blocks_[static_cast<size_t>(id)].next_free) {
      TACHYON_CHECK(pool_of(id) == static_cast<int32_t>(p)) << "block " << id << " on the free list of pool " << p;
      TACHYON_CHECK(blocks_[static_cast<size_t>(id)].ref_count == 0) << "referenced block " << id << " on the free list";
      TACHYON_CHECK(blocks_[static_cast<size_t>(id)].prev_free == prev) << "free list links broken at block " << id;
      TACHYON_CHECK(++walked <= num_blocks()) << "free list has a cycle";
    }
    TACHYON_CHECK(walked == pool.num_free && walked == unreferenced[p])
        << "pool " << p << "'s free list holds " << walked << " blocks, counter says " << pool.num_free
        << ", unreferenced blocks " << unreferenced[p];
    for (const auto& [hash, id] : pool.cached) {
      const Block& block = blocks_[static_cast<size_t>(id)];
      TACHYON_CHECK(pool_of(id) == static_cast<int32_t>(p) && block.cached && block.hash == hash)
          << "prefix cache entry of pool " << p << " points at block " << id << " which does not carry that hash";
    }
  }
}

}  // namespace tachyon::engine
