#include "tachyon/tokenizer/token_index.h"

#include <algorithm>
#include <bit>
#include <functional>

#include "tachyon/base/check.h"

namespace tachyon::tokenizer {

namespace {

constexpr uint64_t kIndexMask = 0xFFFFFFFFull;

}  // namespace

uint64_t TokenIndex::hash(std::string_view text) { return std::hash<std::string_view>{}(text); }

size_t TokenIndex::slot_of(std::string_view text, uint64_t h) const {
  const size_t mask = slots_.size() - 1;
  const uint64_t tag = h >> 32;
  for (size_t i = h & mask;; i = (i + 1) & mask) {  // linear probing; at most half the slots are full
    const uint64_t slot = slots_[i];
    if (slot == 0) return i;
    if ((slot >> 32) == tag && entries_[(slot & kIndexMask) - 1].text == text) return i;
  }
}

void TokenIndex::rehash(size_t slot_count) {
  slots_.assign(slot_count, 0);
  for (size_t e = 0; e < entries_.size(); ++e) {
    const uint64_t h = hash(entries_[e].text);
    slots_[slot_of(entries_[e].text, h)] = (h >> 32) << 32 | (e + 1);
  }
}

void TokenIndex::reserve(size_t count) {
  TACHYON_CHECK(count < kIndexMask / 2) << "token index: " << count << " tokens";
  entries_.reserve(count);
  const size_t wanted = std::bit_ceil(std::max<size_t>(16, 2 * count));
  if (wanted > slots_.size()) rehash(wanted);
}

bool TokenIndex::insert(std::string text, int32_t id) {
  if (2 * (entries_.size() + 1) > slots_.size()) reserve(std::max<size_t>(16, 2 * entries_.size() + 2));
  const uint64_t h = hash(text);
  const size_t i = slot_of(text, h);
  if (slots_[i] != 0) return false;
  entries_.push_back({std::move(text), id});
  slots_[i] = (h >> 32) << 32 | entries_.size();
  return true;
}

std::optional<int32_t> TokenIndex::find(std::string_view text) const {
  if (slots_.empty()) return std::nullopt;
  const uint64_t slot = slots_[slot_of(text, hash(text))];
  if (slot == 0) return std::nullopt;
  return entries_[(slot & kIndexMask) - 1].id;
}

size_t MergeTable::slot_of(uint64_t k) const {
  const size_t mask = keys_.size() - 1;
  for (size_t i = (k * 0x9E3779B97F4A7C15ull) >> 32 & mask;; i = (i + 1) & mask) {
    if (keys_[i] == k || keys_[i] == kEmpty) return i;
  }
}

void MergeTable::rehash(size_t slot_count) {
  std::vector<uint64_t> keys = std::move(keys_);
  std::vector<Merge> merges = std::move(merges_);
  keys_.assign(slot_count, kEmpty);
  merges_.assign(slot_count, Merge{});
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] == kEmpty) continue;
    const size_t slot = slot_of(keys[i]);
    keys_[slot] = keys[i];
    merges_[slot] = merges[i];
  }
}

void MergeTable::reserve(size_t count) {
  const size_t wanted = std::bit_ceil(std::max<size_t>(16, 2 * count));
  if (wanted > keys_.size()) rehash(wanted);
}

void MergeTable::insert_or_assign(int32_t left, int32_t right, Merge merge) {
  if (2 * (count_ + 1) > keys_.size()) reserve(2 * count_ + 2);
  const uint64_t k = key(left, right);
  const size_t slot = slot_of(k);
  if (keys_[slot] == kEmpty) ++count_;
  keys_[slot] = k;
  merges_[slot] = merge;
}

const MergeTable::Merge* MergeTable::find(int32_t left, int32_t right) const {
  if (keys_.empty()) return nullptr;
  const size_t slot = slot_of(key(left, right));
  return keys_[slot] == kEmpty ? nullptr : &merges_[slot];
}

}  // namespace tachyon::tokenizer
