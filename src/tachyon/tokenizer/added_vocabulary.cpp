// Added-token matching, following HF's AddedVocabulary::find_matches: scan for the leftmost
// longest pattern; a single_word token next to a word character is skipped (the scan goes on
// after it); lstrip/rstrip widen the match over neighbouring whitespace.
#include "tachyon/tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tachyon/tokenizer/unicode.h"

namespace tachyon::tokenizer {
namespace {

// Last code point of valid UTF-8 `text` (non-empty).
char32_t last_char(std::string_view text) {
  std::size_t pos = text.size() - 1;
  while (pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) --pos;
  return utf8_decode_at(text, pos);
}

// Start of the whitespace run that ends `text`.
std::size_t trailing_space_start(std::string_view text) {
  std::size_t pos = text.size();
  while (pos > 0) {
    std::size_t start = pos - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (!is_whitespace(utf8_decode_at(text, start))) break;
    pos = start;
  }
  return pos;
}

// Length of the whitespace run that starts `text`.
std::size_t leading_space_len(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size() && is_whitespace(utf8_decode_at(text, pos))) pos += utf8_char_len(text, pos);
  return pos;
}

}  // namespace

void AddedVocabulary::Trie::insert(std::string_view pattern, int32_t token) {
  if (pattern.empty()) return;
  int32_t node = 0;
  for (char c : pattern) {
    const auto byte = static_cast<unsigned char>(c);
    const auto it = nodes[node].children.find(byte);
    if (it != nodes[node].children.end()) {
      node = it->second;
    } else {
      nodes.push_back(Node{});
      const auto child = static_cast<int32_t>(nodes.size() - 1);
      nodes[node].children.emplace(byte, child);
      node = child;
    }
  }
  // The first token listed keeps a duplicated pattern, like the first Aho-Corasick pattern.
  if (nodes[node].token < 0) nodes[node].token = token;
  first_byte[static_cast<unsigned char>(pattern[0])] = true;
}

std::pair<int32_t, std::size_t> AddedVocabulary::Trie::longest_at(std::string_view text, std::size_t pos) const {
  std::pair<int32_t, std::size_t> best{-1, 0};
  int32_t node = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const auto it = nodes[node].children.find(static_cast<unsigned char>(text[i]));
    if (it == nodes[node].children.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) best = {nodes[node].token, i + 1 - pos};
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  // HF lists special tokens before ordinary ones when it builds its matchers.
  std::vector<std::size_t> order(tokens_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_partition(order.begin(), order.end(), [&](std::size_t i) { return tokens_[i].special; });
  for (std::size_t i : order) {
    const AddedToken& t = tokens_[i];
    index_by_id_.emplace(t.id, i);
    id_by_content_.insert(t.content, t.id);
    if (t.normalized) {
      normalized_.insert(normalizer ? normalizer->normalize(t.content) : t.content, static_cast<int32_t>(i));
    } else {
      raw_.insert(t.content, static_cast<int32_t>(i));
    }
  }
}

std::vector<AddedToken> AddedVocabulary::parse(const nlohmann::json& added_tokens) {
  std::vector<AddedToken> tokens;
  if (added_tokens.is_null()) return tokens;
  for (const auto& j : added_tokens) {
    AddedToken t;
    t.id = j.at("id").get<int32_t>();
    t.content = j.at("content").get<std::string>();
    t.special = j.value("special", false);
    t.single_word = j.value("single_word", false);
    t.lstrip = j.value("lstrip", false);
    t.rstrip = j.value("rstrip", false);
    t.normalized = j.value("normalized", !t.special);
    tokens.push_back(std::move(t));
  }
  return tokens;
}

std::vector<TextSegment> AddedVocabulary::split(std::string_view text, const Trie& trie) const {
  std::vector<TextSegment> out;
  std::size_t start_offset = 0;  // end of the last emitted match
  std::size_t pos = 0;           // where the scan for the next match begins
  while (pos < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [index, len] = trie.longest_at(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    std::size_t start = pos;
    std::size_t stop = pos + len;
    pos = stop;
    if (token.single_word) {
      const bool space_before = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      const bool space_after = stop == text.size() || !is_word_char(utf8_decode_at(text, stop));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += leading_space_len(text.substr(stop));
    if (start_offset < start) out.push_back({text.substr(start_offset, start - start_offset), std::nullopt});
    out.push_back({text.substr(start, stop - start), token.id});
    start_offset = stop;
    pos = std::max(pos, stop);
  }
  if (start_offset < text.size() || out.empty()) out.push_back({text.substr(start_offset), std::nullopt});
  return out;
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  const auto it = index_by_id_.find(id);
  return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  return id_by_content_.find(content);
}

int32_t AddedVocabulary::max_id() const {
  int32_t m = -1;
  for (const auto& t : tokens_) m = std::max(m, t.id);
  return m;
}

}  // namespace tachyon::tokenizer
