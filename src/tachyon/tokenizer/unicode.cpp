// UTF-8 helpers. The lossy repair follows the maximal-subpart rule so that decode() gives the
// same U+FFFD count as HF for byte-level tokens that split a character.
#include "tachyon/tokenizer/unicode.h"

#include <cstdlib>
#include <memory>

#include <utf8proc.h>

#include "tachyon/base/check.h"

namespace tachyon::tokenizer {
namespace {

// Bytes needed after `lead` and the allowed range of the first continuation byte; 0 needed means
// the lead byte can never start a valid sequence.
struct LeadInfo {
  int needed;
  unsigned char first_lo;
  unsigned char first_hi;
};

LeadInfo lead_info(unsigned char b) {
  if (b >= 0xC2 && b <= 0xDF) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return {2, 0x80, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {0, 0, 0};
}

// Scans one sequence at `pos`: returns the number of bytes it spans and whether it is valid.
// An invalid sequence spans its maximal subpart (at least one byte).
std::size_t scan_sequence(std::string_view s, std::size_t pos, bool* valid) {
  const auto b = static_cast<unsigned char>(s[pos]);
  if (b < 0x80) {
    *valid = true;
    return 1;
  }
  const LeadInfo info = lead_info(b);
  std::size_t j = pos + 1;
  int got = 0;
  while (got < info.needed && j < s.size()) {
    const auto c = static_cast<unsigned char>(s[j]);
    const unsigned char lo = got == 0 ? info.first_lo : 0x80;
    const unsigned char hi = got == 0 ? info.first_hi : 0xBF;
    if (c < lo || c > hi) break;
    ++j;
    ++got;
  }
  *valid = info.needed > 0 && got == info.needed;
  return j - pos;
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    bool valid = false;
    i += scan_sequence(text, i, &valid);
    if (!valid) return false;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t i = 0;
  while (i < bytes.size()) {
    bool valid = false;
    const std::size_t n = scan_sequence(bytes, i, &valid);
    if (valid) {
      out.append(bytes.substr(i, n));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += n;
  }
  return out;
}

std::size_t utf8_char_len(std::string_view text, std::size_t pos) {
  bool valid = false;
  return scan_sequence(text, pos, &valid);
}

char32_t utf8_decode_at(std::string_view text, std::size_t pos) {
  const auto b = static_cast<unsigned char>(text[pos]);
  const std::size_t n = utf8_char_len(text, pos);
  if (n == 1) return b;
  char32_t cp = b & (0x7F >> n);
  for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[pos + k]) & 0x3F);
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string nfc(std::string_view text) {
  // Pure ASCII is already NFC; skipping utf8proc keeps English text cheap.
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                              static_cast<utf8proc_ssize_t>(text.size()), &out,
                              static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  TACHYON_CHECK(n >= 0) << "NFC normalization failed: " << utf8proc_errmsg(n);
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

bool is_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_word_char(char32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;  // Join_Control is part of \w
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_NL:
      return true;
    default:
      return false;
  }
}

}  // namespace tachyon::tokenizer
