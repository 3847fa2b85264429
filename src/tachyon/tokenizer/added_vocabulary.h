// Added tokens of tokenizer.json ("added_tokens"): special and ordinary tokens that are cut out of
// the text before the model sees it. Tokens with normalized=false match the raw text; tokens with
// normalized=true match the normalized text (their content normalized the same way). Matching is
// leftmost-longest, as HF's Aho-Corasick, and honours single_word, lstrip and rstrip.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tachyon/tokenizer/bpe_model.h"
#include "tachyon/tokenizer/normalizer.h"
#include "tachyon/tokenizer/token_index.h"

namespace tachyon::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
};

// A stretch of text: either an added token (id set) or text for the model (id empty).
struct TextSegment {
  std::string_view text;
  std::optional<int32_t> id;
};

class AddedVocabulary {
 public:
  AddedVocabulary() = default;
  // `normalizer` (may be null) is applied to the content of normalized tokens.
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);
  static std::vector<AddedToken> parse(const nlohmann::json& added_tokens);

  // Cuts `text` at non-normalized tokens (raw pass) or at normalized tokens (normalized pass).
  std::vector<TextSegment> split_raw(std::string_view text) const { return split(text, raw_); }
  std::vector<TextSegment> split_normalized(std::string_view text) const { return split(text, normalized_); }

  const AddedToken* find(int32_t id) const;
  std::optional<int32_t> token_to_id(std::string_view content) const;
  int32_t max_id() const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // Byte trie of the patterns of one pass; a node's token is the index into tokens_, or -1.
  struct Trie {
    struct Node {
      std::unordered_map<unsigned char, int32_t> children;
      int32_t token = -1;
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void insert(std::string_view pattern, int32_t token);
    // Longest pattern starting at text[pos]: (token index, length) or token -1.
    std::pair<int32_t, std::size_t> longest_at(std::string_view text, std::size_t pos) const;
  };
  std::vector<TextSegment> split(std::string_view text, const Trie& trie) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, std::size_t> index_by_id_;
  TokenIndex id_by_content_;
  Trie raw_;
  Trie normalized_;
};

}  // namespace tachyon::tokenizer
