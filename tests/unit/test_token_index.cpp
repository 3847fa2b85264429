// TokenIndex and MergeTable (tokenizer/token_index.h) against std::unordered_map: the same values
// found, the same misses; TokenIndex keeps the first id of a repeated text and the insertion
// order, MergeTable the last merge of a repeated pair; growth from empty and from a reserve; the
// empty string and the pair (0, 0) keys like any other.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "tachyon/tokenizer/token_index.h"

namespace tachyon::tokenizer {
namespace {

std::string random_text(std::mt19937& gen) {
  std::uniform_int_distribution<int> length(0, 12), byte(0, 255);
  std::string s(static_cast<size_t>(length(gen)), '\0');
  for (char& ch : s) ch = static_cast<char>(byte(gen));
  return s;
}

TEST(TokenIndex, FindsWhatAMapFindsAndKeepsTheFirstId) {
  for (size_t reserved : {size_t{0}, size_t{5000}}) {
    std::mt19937 gen(7);
    TokenIndex index;
    index.reserve(reserved);
    std::unordered_map<std::string, int32_t> oracle;
    std::vector<std::string> order;
    for (int32_t id = 0; id < 20000; ++id) {
      std::string text = random_text(gen);
      const bool fresh = oracle.emplace(text, id).second;
      EXPECT_EQ(index.insert(text, id), fresh) << "id " << id;
      if (fresh) order.push_back(text);
    }
    EXPECT_EQ(index.size(), oracle.size());
    for (const auto& [text, id] : oracle) ASSERT_EQ(index.find(text), std::optional<int32_t>(id));
    for (int i = 0; i < 20000; ++i) {
      const std::string probe = random_text(gen) + "#";  // '#' then end: rarely in the set
      const auto it = oracle.find(probe);
      ASSERT_EQ(index.find(probe), it == oracle.end() ? std::nullopt : std::optional<int32_t>(it->second));
    }
    size_t at = 0;
    index.for_each([&](const std::string& text, int32_t id) {
      ASSERT_LT(at, order.size());
      EXPECT_EQ(text, order[at++]);
      EXPECT_EQ(id, oracle.at(text));
    });
    EXPECT_EQ(at, order.size());
  }
}

TEST(TokenIndex, EmptyIndexAndEmptyText) {
  TokenIndex index;
  EXPECT_EQ(index.find(""), std::nullopt);
  EXPECT_EQ(index.find("a"), std::nullopt);
  EXPECT_TRUE(index.insert("", 3));
  EXPECT_FALSE(index.insert("", 4));
  EXPECT_EQ(index.find(""), std::optional<int32_t>(3));
  EXPECT_EQ(index.find("a"), std::nullopt);
}

TEST(MergeTable, FindsWhatAMapFindsAndKeepsTheLastMerge) {
  for (size_t reserved : {size_t{0}, size_t{30000}}) {
    std::mt19937 gen(11);
    std::uniform_int_distribution<int32_t> id(0, 300);  // a small range: repeated pairs are common
    MergeTable table;
    table.reserve(reserved);
    std::unordered_map<uint64_t, MergeTable::Merge> oracle;
    auto key = [](int32_t l, int32_t r) { return uint64_t(uint32_t(l)) << 32 | uint32_t(r); };
    for (int32_t rank = 0; rank < 40000; ++rank) {
      const int32_t l = id(gen), r = id(gen);
      table.insert_or_assign(l, r, {.rank = rank, .new_id = l + r});
      oracle[key(l, r)] = {.rank = rank, .new_id = l + r};
    }
    table.insert_or_assign(0, 0, {.rank = -1, .new_id = 7});
    oracle[key(0, 0)] = {.rank = -1, .new_id = 7};
    for (int32_t l = 0; l <= 301; ++l) {
      for (int32_t r = 0; r <= 301; ++r) {
        const MergeTable::Merge* got = table.find(l, r);
        const auto it = oracle.find(key(l, r));
        ASSERT_EQ(got != nullptr, it != oracle.end()) << l << " " << r;
        if (got != nullptr) {
          ASSERT_EQ(got->rank, it->second.rank);
          ASSERT_EQ(got->new_id, it->second.new_id);
        }
      }
    }
  }
  EXPECT_EQ(MergeTable().find(1, 2), nullptr);
}

}  // namespace
}  // namespace tachyon::tokenizer
