#include "tachyon/structured/token_vocabulary.h"

#include <algorithm>
#include <numeric>

#include "tachyon/base/check.h"
#include "tachyon/structured/reasoning_prefix.h"
#include "tachyon/structured/tool_call_grammar.h"
#include "tachyon/tokenizer/byte_level.h"
#include "tachyon/tokenizer/decoder.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::structured {
namespace {

std::string replace_metaspace(const std::string& token) {
  static const std::string kMeta = "\xE2\x96\x81";  // U+2581
  std::string out;
  for (size_t i = 0; i < token.size();) {
    if (token.compare(i, kMeta.size(), kMeta) == 0) {
      out += ' ';
      i += kMeta.size();
    } else {
      out += token[i++];
    }
  }
  return out;
}

}  // namespace

std::shared_ptr<const TokenVocabulary> TokenVocabulary::from_tokenizer(const tokenizer::Tokenizer& tokenizer,
                                                                       int64_t model_vocab_size) {
  const int32_t n = tokenizer.vocab_size();
  // A SentencePiece vocabulary with byte fallback has <0x0A>; a byte-level one spells bytes with
  // the GPT-2 table and has no such token.
  const bool sentencepiece = tokenizer.token_to_id("<0x0A>").has_value();
  std::vector<std::string> tokens(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.is_special(id)) continue;
    std::string text;
    try {
      text = tokenizer.id_to_token(id);
    } catch (const Error&) {
      continue;  // a hole in the id range
    }
    std::string& out = tokens[static_cast<size_t>(id)];
    if (sentencepiece) {
      const int b = tokenizer::byte_token_value(text);
      out = b >= 0 ? std::string(1, static_cast<char>(b)) : replace_metaspace(text);
    } else if (std::optional<std::string> bytes = tokenizer::byte_level_decode(text)) {
      out = std::move(*bytes);
    } else {
      out = text;  // an added token outside the table keeps its own UTF-8 (as HF decodes it)
    }
  }
  std::vector<std::pair<std::string, int32_t>> markers;
  std::vector<std::string> marker_texts = tool_call_markers();
  for (const std::string& text : reasoning_markers()) marker_texts.push_back(text);
  for (const std::string& text : marker_texts) {
    const std::vector<int32_t> ids = tokenizer.encode(text, /*add_special_tokens=*/false);
    if (ids.size() == 1) markers.emplace_back(text, ids[0]);
  }
  return std::make_shared<const TokenVocabulary>(tokens, model_vocab_size, markers);
}

std::string TokenVocabulary::marker_bytes(int32_t id) {
  const auto u = static_cast<uint32_t>(id);
  return {'\xFF', static_cast<char>(u >> 24), static_cast<char>(u >> 16), static_cast<char>(u >> 8), static_cast<char>(u)};
}

std::optional<int32_t> TokenVocabulary::marker_token(std::string_view text) const {
  for (const auto& [marker, id] : markers_) {
    if (marker == text) return id;
  }
  return std::nullopt;
}

bool TokenVocabulary::is_marker(int32_t id) const {
  for (const auto& marker : markers_) {
    if (marker.second == id) return true;
  }
  return false;
}

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& tokens, int64_t model_vocab_size,
                                 const std::vector<std::pair<std::string, int32_t>>& markers)
    : bytes_(tokens), vocab_size_(model_vocab_size > 0 ? model_vocab_size : static_cast<int64_t>(tokens.size())) {
  // Tokens past the model's logits can never be sampled: they take no part.
  if (static_cast<int64_t>(bytes_.size()) > vocab_size_) bytes_.resize(static_cast<size_t>(vocab_size_));
  // 0xFF starts every marker spelling and is never UTF-8: a token holding it takes no part.
  for (std::string& b : bytes_) {
    if (b.find('\xFF') != std::string::npos) b.clear();
  }
  // Every spelling of every token: its bytes, and a marker's private spelling besides.
  std::vector<std::pair<std::string, int32_t>> spellings;
  for (size_t id = 0; id < bytes_.size(); ++id) {
    if (!bytes_[id].empty()) spellings.emplace_back(bytes_[id], static_cast<int32_t>(id));
  }
  for (const auto& [text, id] : markers) {
    if (id < 0 || id >= static_cast<int64_t>(bytes_.size())) continue;  // past the model's logits
    if (!is_marker(id)) spellings.emplace_back(marker_bytes(id), id);
    markers_.emplace_back(text, id);
  }
  // Sorting the byte strings lists the trie in preorder: each string's new nodes are the bytes
  // after its common prefix with the previous string.
  std::sort(spellings.begin(), spellings.end());
  node_byte_.push_back(0);
  node_depth_.push_back(0);
  std::vector<int32_t> path{0};  // path[d]: the node at depth d on the current string
  std::vector<std::vector<int32_t>> ending(1);
  const std::string* previous = nullptr;
  for (const auto& [s, id] : spellings) {
    TACHYON_CHECK(s.size() < 65535) << "token " << id << " is too long for the trie";
    size_t common = 0;
    if (previous != nullptr) {
      while (common < s.size() && common < previous->size() && s[common] == (*previous)[common]) ++common;
    }
    path.resize(common + 1);
    for (size_t d = common; d < s.size(); ++d) {
      node_byte_.push_back(static_cast<uint8_t>(s[d]));
      node_depth_.push_back(static_cast<uint16_t>(d + 1));
      ending.emplace_back();
      path.push_back(static_cast<int32_t>(node_byte_.size()) - 1);
    }
    ending[static_cast<size_t>(path.back())].push_back(id);
    max_depth_ = std::max(max_depth_, static_cast<int32_t>(s.size()));
    previous = &s;
  }
  const int32_t count = num_nodes();
  node_end_.assign(static_cast<size_t>(count), count);
  // A node's subtree ends at the next node whose depth is not greater.
  std::vector<int32_t> open;
  for (int32_t i = 0; i < count; ++i) {
    while (!open.empty() && node_depth_[static_cast<size_t>(open.back())] >= node_depth_[static_cast<size_t>(i)]) {
      node_end_[static_cast<size_t>(open.back())] = i;
      open.pop_back();
    }
    open.push_back(i);
  }
  node_tokens_.assign(static_cast<size_t>(count) + 1, 0);
  for (int32_t i = 0; i < count; ++i) {
    node_tokens_[static_cast<size_t>(i)] = static_cast<int32_t>(tokens_.size());
    for (int32_t id : ending[static_cast<size_t>(i)]) tokens_.push_back(id);
  }
  node_tokens_[static_cast<size_t>(count)] = static_cast<int32_t>(tokens_.size());
}

}  // namespace tachyon::structured
