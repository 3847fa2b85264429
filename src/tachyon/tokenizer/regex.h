// PCRE2 regular expressions (UTF + UCP) for Split pre-tokenizers and Replace normalizers.
// HF compiles these patterns with Oniguruma; the one difference that matters for tokenizer
// patterns is \s, which in Oniguruma also matches U+0085, so the pattern is rewritten to match.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

struct pcre2_real_code_8;

namespace tachyon::tokenizer {

class Regex {
 public:
  // Throws tachyon::Error with PCRE2's message and offset when the pattern does not compile.
  explicit Regex(const std::string& pattern);

  // [start, end) byte ranges of successive non-overlapping matches in valid UTF-8 `text`.
  // An empty match is reported and the scan moves on by one character.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

  // A pattern that matches `literal` exactly.
  static std::string escape(std::string_view literal);

 private:
  std::shared_ptr<pcre2_real_code_8> code_;
};

// The pattern with \s and \S widened to Oniguruma's whitespace set (adds U+0085).
std::string onig_compatible_pattern(std::string_view pattern);

}  // namespace tachyon::tokenizer
