// The tokenizer's two hot lookups, each on one flat open-addressing array: TokenIndex (token
// text -> id) and MergeTable ((left id, right id) -> the merge they make).
//
// Why our own: reading Llama-3's tokenizer.json looks up 840K merge parts in its 128K-token
// vocabulary and inserts 280K merges, and node-based std::unordered_maps took about half of
// BpeModel::from_json (a lookup: bucket, node, string, each a cache miss; an insert: a node
// allocation); encode() looks up every piece and every adjacent pair the same way. Here a slot
// holds the key (the merge pair) or 32 bits of its hash beside its entry's index (a text), so a
// lookup reads one slot and, on a tag match, one entry (its text inline for the short strings
// tokens are). Two small maps did not justify a hash-map library among the packages the GPU
// machine is carried.
// Tests: tests/unit/test_token_index.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon::tokenizer {

class TokenIndex {
 public:
  void reserve(size_t count);
  // Adds `text` -> `id`; false, changing nothing, when `text` is already there (the first id stays).
  bool insert(std::string text, int32_t id);
  std::optional<int32_t> find(std::string_view text) const;
  size_t size() const { return entries_.size(); }

  // Every (text, id) in insertion order.
  template <typename Visit>
  void for_each(Visit visit) const {
    for (const Entry& e : entries_) visit(e.text, e.id);
  }

 private:
  struct Entry {
    std::string text;
    int32_t id;
  };
  static uint64_t hash(std::string_view text);
  // The slot of `text` (hash `h`): where it is, or the empty slot where it would go.
  size_t slot_of(std::string_view text, uint64_t h) const;
  void rehash(size_t slot_count);

  std::vector<Entry> entries_;
  std::vector<uint64_t> slots_;  // 0: empty; else (hash's upper 32 bits) << 32 | (entry index + 1)
};

// (left id, right id) -> the merge they make: 280K merges for Llama-3, inserted while the
// tokenizer loads and looked up for every adjacent pair encode() sees.
class MergeTable {
 public:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  void reserve(size_t count);
  void insert_or_assign(int32_t left, int32_t right, Merge merge);  // a later merge of the pair wins
  const Merge* find(int32_t left, int32_t right) const;

 private:
  static uint64_t key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  size_t slot_of(uint64_t k) const;
  void rehash(size_t slot_count);

  static constexpr uint64_t kEmpty = ~uint64_t{0};  // no pair of ids below 2^31 has this key
  std::vector<uint64_t> keys_;
  std::vector<Merge> merges_;
  size_t count_ = 0;
};

}  // namespace tachyon::tokenizer
