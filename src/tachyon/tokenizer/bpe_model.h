// The BPE model of tokenizer.json ("model": {"type": "BPE"}): vocabulary, ranked merges and the
// per-piece merge loop, with HF's options ignore_merges, byte_fallback, unk_token + fuse_unk and
// continuing_subword_prefix / end_of_word_suffix.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tachyon/tokenizer/token_index.h"

namespace tachyon::tokenizer {

// The "model" object's vocabulary and merges, apart from the rest of it: Tokenizer::from_dir
// streams them out of the parse of tokenizer.json (as JSON values they were half of it).
struct BpeTables {
  std::vector<std::pair<std::string, int32_t>> vocab;       // (token, id) in the file's order
  std::vector<std::pair<std::string, std::string>> merges;  // (left, right) in rank order

  // One merges entry: an "a b" string or an ["a", "b"] pair; `rank` and `source` name it in errors.
  static std::pair<std::string, std::string> merge_of(const nlohmann::json& entry, size_t rank,
                                                      const std::string& source);
  // The tables of a model object held whole.
  static BpeTables from_json(const nlohmann::json& model, const std::string& source);
};

class BpeModel {
 public:
  // Reads vocab and merges (either "a b" strings or ["a", "b"] pairs) from the "model" object.
  // Throws tachyon::Error naming `source` when a merge refers to a token not in the vocabulary.
  static BpeModel from_json(const nlohmann::json& model, const std::string& source) {
    return from_tables(model, BpeTables::from_json(model, source), source);
  }
  // The same from `tables`, the options (unk_token, byte_fallback, ...) from `model`, whose own
  // vocab and merges are not read.
  static BpeModel from_tables(const nlohmann::json& model, const BpeTables& tables, const std::string& source);

  // Ids of one pre-tokenized piece (already byte-mapped for byte-level vocabularies).
  std::vector<int32_t> tokenize(std::string_view piece) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr when the id has no token.
  const std::string* id_to_token(int32_t id) const;
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:

  struct Symbol {
    int32_t id;
    int32_t prev;  // index of the previous live symbol, -1 at the start
    int32_t next;  // index of the next live symbol, -1 at the end
    int32_t len;   // bytes of the piece it covers; 0 once merged into its left neighbour
  };
  std::vector<Symbol> initial_symbols(std::string_view piece) const;
  void merge_all(std::vector<Symbol>& symbols) const;

  TokenIndex vocab_;
  std::vector<std::string> id_to_token_;
  MergeTable merges_;
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  int32_t byte_ids_[256];  // id of "<0xXX>" per byte, -1 when absent (byte_fallback)
};

}  // namespace tachyon::tokenizer
