// Normalizers of tokenizer.json ("normalizer"): NFC, Prepend, Replace and Sequence. They run on
// each stretch of text between added tokens, before pre-tokenization. Offsets are not tracked:
// the engine needs ids, not alignments.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tachyon::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string_view text) const = 0;
};

// Builds the normalizer described by `config`; null JSON gives nullptr (no normalization).
// Unknown types throw tachyon::Error naming the type and `source` (the tokenizer.json path).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& config, const std::string& source);

}  // namespace tachyon::tokenizer
