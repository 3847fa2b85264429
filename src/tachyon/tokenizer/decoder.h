// Decoders of tokenizer.json ("decoder"): ByteLevel, Replace, ByteFallback, Fuse, Strip and
// Sequence. Like HF, each decoder maps a list of token strings to a list of strings, and the
// result is their concatenation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tachyon::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;

  // decode_chain() joined: the decoded text.
  std::string decode(std::vector<std::string> tokens) const;
};

// Null JSON gives nullptr (tokens are then joined with spaces, as HF does). Unknown types throw
// tachyon::Error naming the type and `source`.
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& config, const std::string& source);

// The byte a byte-fallback token "<0xXX>" stands for, or -1 for any other token.
int byte_token_value(const std::string& token);

}  // namespace tachyon::tokenizer
