// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): Split (regex or literal, every HF split
// behaviour), ByteLevel and Sequence. Each turns a list of pieces into a finer list; the BPE
// model then encodes every piece on its own.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tachyon::tokenizer {

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the pieces of `text` to `out`; empty pieces are dropped.
  virtual void split(std::string_view text, std::vector<std::string>& out) const = 0;

  // Applies split() to each of `pieces`.
  std::vector<std::string> split_all(const std::vector<std::string>& pieces) const;
};

// Builds the pre-tokenizer described by `config`; null JSON gives nullptr (the whole text is one
// piece). Unknown types throw tachyon::Error naming the type and `source`.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& config, const std::string& source);

}  // namespace tachyon::tokenizer
