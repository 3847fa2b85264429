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

KvCacheManager::KvCacheManager(int32_t num_blocks, int32_t block_size, bool enable_prefix_caching)
    : block_size_(block_size), prefix_caching_(enable_prefix_caching), blocks_(static_cast<size_t>(num_blocks)) {
  TACHYON_CHECK(num_blocks > 0 && block_size > 0) << "KV cache needs blocks: num_blocks " << num_blocks
                                                  << ", block_size " << block_size;
  for (int32_t id = 0; id < num_blocks; ++id) free_list_push_back(id);
}

std::vector<BlockHash> KvCacheManager::cached_hashes() const {
  std::vector<BlockHash> hashes;
  hashes.reserve(cached_.size());
  for (const auto& [hash, block] : cached_) hashes.push_back(hash);
  return hashes;
}

std::vector<int32_t> KvCacheManager::find_cached_prefix(std::span<const BlockHash> block_hashes, int64_t num_tokens) {
  std::vector<int32_t> hits;
  if (!prefix_caching_) return hits;
  stats_.prefix_queries_tokens += num_tokens;
  const int64_t max_blocks = (num_tokens - 1) / block_size_;  // leave >= 1 token to compute
  for (int64_t b = 0; b < max_blocks && b < static_cast<int64_t>(block_hashes.size()); ++b) {
    auto it = cached_.find(block_hashes[static_cast<size_t>(b)]);
    if (it == cached_.end()) break;
    hits.push_back(it->second);
  }
  stats_.prefix_hit_tokens += static_cast<int64_t>(hits.size()) * block_size_;
  return hits;
}

bool KvCacheManager::allocate(std::vector<int32_t>& block_table, std::span<const int32_t> cached_prefix,
                              int64_t num_tokens) {
  TACHYON_CHECK(cached_prefix.empty() || block_table.empty()) << "a cached prefix can only start a block table";
  const int64_t needed_total = (num_tokens + block_size_ - 1) / block_size_;
  const int64_t have = static_cast<int64_t>(block_table.size() + cached_prefix.size());
  const int64_t fresh = std::max<int64_t>(0, needed_total - have);
  int64_t revived = 0;  // cached blocks that leave the free list when taken
  for (int32_t id : cached_prefix) revived += blocks_[static_cast<size_t>(id)].ref_count == 0;
  if (fresh + revived > num_free_) return false;
  for (int32_t id : cached_prefix) {
    add_reference(id);
    block_table.push_back(id);
  }
  for (int64_t i = 0; i < fresh; ++i) {
    int32_t id = take_free_block();
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
    auto [it, inserted] = cached_.emplace(block_hashes[b], block_table[b]);
    if (!inserted) continue;  // the same tokens were computed in another block first
    block.cached = true;
    block.hash = block_hashes[b];
  }
}

void KvCacheManager::free(std::vector<int32_t>& block_table) {
  for (auto it = block_table.rbegin(); it != block_table.rend(); ++it) {
    Block& block = blocks_[static_cast<size_t>(*it)];
    TACHYON_CHECK(block.ref_count > 0) << "double free of KV block " << *it;
    if (--block.ref_count == 0) free_list_push_back(*it);
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

int32_t KvCacheManager::take_free_block() {
  TACHYON_CHECK(free_head_ >= 0) << "no free KV block (the caller must check capacity first)";
  int32_t id = free_head_;
  free_list_remove(id);
  Block& block = blocks_[static_cast<size_t>(id)];
  if (block.cached) {
    cached_.erase(block.hash);
    block.cached = false;
    ++stats_.evictions;
  }
  return id;
}

void KvCacheManager::free_list_push_back(int32_t id) {
  Block& block = blocks_[static_cast<size_t>(id)];
  block.prev_free = free_tail_;
  block.next_free = -1;
  if (free_tail_ >= 0) blocks_[static_cast<size_t>(free_tail_)].next_free = id;
  else free_head_ = id;
  free_tail_ = id;
  ++num_free_;
}

void KvCacheManager::free_list_push_front(int32_t id) {
  Block& block = blocks_[static_cast<size_t>(id)];
  block.prev_free = -1;
  block.next_free = free_head_;
  if (free_head_ >= 0) blocks_[static_cast<size_t>(free_head_)].prev_free = id;
  else free_tail_ = id;
  free_head_ = id;
  ++num_free_;
}

void KvCacheManager::free_list_remove(int32_t id) {
  Block& block = blocks_[static_cast<size_t>(id)];
  if (block.prev_free >= 0) blocks_[static_cast<size_t>(block.prev_free)].next_free = block.next_free;
  else free_head_ = block.next_free;
  if (block.next_free >= 0) blocks_[static_cast<size_t>(block.next_free)].prev_free = block.prev_free;
  else free_tail_ = block.prev_free;
  block.prev_free = block.next_free = -1;
  --num_free_;
}

void KvCacheManager::check_invariants(std::span<const std::vector<int32_t>* const> live_tables) const {
  std::vector<int32_t> expected_refs(blocks_.size(), 0);
  for (const auto* table : live_tables) {
    for (int32_t id : *table) {
      TACHYON_CHECK(id >= 0 && id < num_blocks()) << "block id " << id << " out of range";
      ++expected_refs[static_cast<size_t>(id)];
    }
  }
  int32_t unreferenced = 0;
  for (size_t id = 0; id < blocks_.size(); ++id) {
    TACHYON_CHECK(blocks_[id].ref_count == expected_refs[id])
        << "block " << id << " has ref_count " << blocks_[id].ref_count << " but " << expected_refs[id]
        << " tables hold it";
    unreferenced += blocks_[id].ref_count == 0;
  }
  int32_t walked = 0;
  for (int32_t id = free_head_, prev = -1; id >= 0; prev = id, id = blocks_[static_cast<size_t>(id)].next_free) {
    TACHYON_CHECK(blocks_[static_cast<size_t>(id)].ref_count == 0) << "referenced block " << id << " on the free list";
    TACHYON_CHECK(blocks_[static_cast<size_t>(id)].prev_free == prev) << "free list links broken at block " << id;
    TACHYON_CHECK(++walked <= num_blocks()) << "free list has a cycle";
  }
  TACHYON_CHECK(walked == num_free_ && walked == unreferenced)
      << "free list holds " << walked << " blocks, counter says " << num_free_ << ", unreferenced blocks "
      << unreferenced;
  for (const auto& [hash, id] : cached_) {
    const Block& block = blocks_[static_cast<size_t>(id)];
    TACHYON_CHECK(block.cached && block.hash == hash) << "prefix cache entry points at block " << id
                                                      << " which does not carry that hash";
  }
}

}  // namespace tachyon::engine
