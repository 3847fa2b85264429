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
#pragma once

#include <cstdint>
#include <memory>
#include <string>
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
  TokenVocabulary(const std::vector<std::string>& tokens, int64_t model_vocab_size);
  static std::shared_ptr<const TokenVocabulary> from_tokenizer(const tokenizer::Tokenizer& tokenizer,
                                                               int64_t model_vocab_size);

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
  int64_t vocab_size_ = 0;
};

}  // namespace tachyon::structured
