// TokenVocabulary: the model's tokens as byte strings, in a byte trie laid out for one fast walk.
// Built once per tokenizer (server start) and shared by every constraint.
//
// Why a trie: a mask asks, for every token, "can the automaton take these bytes?". Tokens that
// share a prefix share the work of matching it, and a prefix the automaton refuses removes its
// whole subtree at once (inside a JSON number, everything not starting with a digit, '.', 'e', ','
// or a closing bracket goes in one step). The trie is stored in preorder with each node's depth
// and the index after its subtree, so the walk is a loop over an array that skips subtrees by
// jumping, with no pointers to chase.
//
// Which tokens take part: every id of the tokenizer except special tokens (they never appear in
// constrained text; EOS and stop ids are added by the engine exactly when the grammar may end)
// and tokens with no bytes. Byte-level vocabularies (GPT-2 table: Llama-3, Qwen, DeepSeek) map
// each character to its byte; SentencePiece vocabularies with byte fallback (Llama-2) spell
// bytes as <0xNN> and spaces as U+2581. Ids at or above the tokenizer's size (padding rows of
// the model's vocabulary) are never allowed.
//
// Marker tokens: a tool-call format's markers (tool_call_markers(): Hermes' <tool_call>,
// DeepSeek-V3's call tokens, Mistral's [TOOL_CALLS] ...) and the reasoning markers
// (reasoning_markers(): <think>, </think>) that the tokenizer encodes as one token
// are what the model writes; spelled as their text, a grammar would also let the model write
// them in ordinary pieces ("<", "tool", "_call", ">"), which it never does, and a special token
// could not be written at all. So each such token also gets a private spelling, marker_bytes(id):
// byte 0xFF, never part of UTF-8 and so of no grammar's text, then the id. A grammar that asks
// for marker_bytes(id) allows exactly that token there. No other token's spelling holds 0xFF
// (such a token could never be taken by a grammar anyway), so nothing else can spell a marker.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tachyon::tokenizer {
class Tokenizer;
}

namespace tachyon::structured {

class TokenVocabulary {
 public:
  // tokens[id]: the token's bytes, or "" for an id that never takes part. model_vocab_size: the
  // width of the model's logits, which is the masks' width (tokens past it take no part); <= 0:
  // tokens.size().
  // `markers`: (marker text, token id) pairs; each id also takes part as marker_bytes(id).
  TokenVocabulary(const std::vector<std::string>& tokens, int64_t model_vocab_size,
                  const std::vector<std::pair<std::string, int32_t>>& markers = {});
  // The markers are those of tool_call_markers() and reasoning_markers() that `tokenizer`
  // encodes as one token.
  static std::shared_ptr<const TokenVocabulary> from_tokenizer(const tokenizer::Tokenizer& tokenizer,
                                                               int64_t model_vocab_size);

  // "\xFF" then the id's 4 bytes, most significant first.
  static std::string marker_bytes(int32_t id);
  // The token that spells `text` as a marker; nullopt when the text is no marker of this vocabulary.
  std::optional<int32_t> marker_token(std::string_view text) const;
  bool is_marker(int32_t id) const;

  int64_t vocab_size() const { return vocab_size_; }  // the model's (mask width in bits)
  int64_t num_mask_words() const { return (vocab_size_ + 31) / 32; }
  const std::string& token_bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  int64_t num_tokens() const { return static_cast<int64_t>(bytes_.size()); }

  // The trie in preorder; node 0 is the root (no byte, depth 0).
  int32_t num_nodes() const { return static_cast<int32_t>(node_byte_.size()); }
  std::vector<uint8_t> node_byte_;     // [num_nodes] the byte on the edge into the node
  std::vector<uint16_t> node_depth_;   // [num_nodes]
  std::vector<int32_t> node_end_;      // [num_nodes] preorder index after the node's subtree
  std::vector<int32_t> node_tokens_;   // [num_nodes + 1] range into tokens_ of ids ending here
  std::vector<int32_t> tokens_;        // ids grouped by node
  int32_t max_depth_ = 0;

 private:
  std::vector<std::string> bytes_;
  std::vector<std::pair<std::string, int32_t>> markers_;  // (text, id)
  int64_t vocab_size_ = 0;
};

}  // namespace tachyon::structured
