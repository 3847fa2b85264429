// PCRE2 wrapper: compiled once (JIT when available), shared by copies, matched with a fresh match
// block per call so one Regex serves many threads.
#include "tachyon/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/unicode.h"

namespace tachyon::tokenizer {

std::string onig_compatible_pattern(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern) {
  const std::string rewritten = onig_compatible_pattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    TACHYON_FAIL() << "bad regex pattern '" << pattern << "' at offset " << offset << ": "
                   << reinterpret_cast<const char*>(message);
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional speed-up; falls back to the interpreter
  code_ = std::shared_ptr<pcre2_code>(code, pcre2_code_free);
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  // The UTF check runs once here; each pcre2_match call below skips it (it would rescan the
  // whole subject per match and make long inputs quadratic).
  TACHYON_CHECK(is_valid_utf8(text)) << "regex subject is not valid UTF-8";
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code_.get(), nullptr), pcre2_match_data_free);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(code_.get(), subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    TACHYON_CHECK(rc >= 0) << "regex match failed with PCRE2 error " << rc;
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const std::size_t start = ovector[0];
    const std::size_t end = ovector[1];
    matches.emplace_back(start, end);
    if (end > start) {
      pos = end;
    } else {
      if (end >= text.size()) break;
      pos = end + utf8_char_len(text, end);
    }
  }
  return matches;
}

std::string Regex::escape(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    const bool plain = u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!plain) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace tachyon::tokenizer
