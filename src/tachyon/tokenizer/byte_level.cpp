// The table is bytes_to_unicode() of GPT-2: printable Latin-1 bytes stand for themselves, the rest
// are shifted to U+0100 upwards in byte order.
#include "tachyon/tokenizer/byte_level.h"

#include <array>

#include "tachyon/tokenizer/unicode.h"

namespace tachyon::tokenizer {
namespace {

struct ByteTable {
  std::array<char32_t, 256> byte_to_char{};
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> char_to_byte{};  // every table character is below U+0200

  ByteTable() {
    char_to_byte.fill(-1);
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + shifted++);
      utf8_append(byte_to_utf8[b], byte_to_char[b]);
      char_to_byte[byte_to_char[b]] = static_cast<int16_t>(b);
    }
  }
};

const ByteTable& table() {
  static const ByteTable t;
  return t;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const ByteTable& t = table();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.byte_to_utf8[static_cast<unsigned char>(c)];
  return out;
}

std::optional<uint8_t> byte_level_byte(char32_t cp) {
  if (cp >= 512) return std::nullopt;
  const int16_t b = table().char_to_byte[cp];
  if (b < 0) return std::nullopt;
  return static_cast<uint8_t>(b);
}

std::optional<std::string> byte_level_decode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (std::size_t i = 0; i < token.size();) {
    const std::size_t n = utf8_char_len(token, i);
    // A stray byte (not possible in tokens read from JSON) is not a table character.
    const bool stray = n == 1 && static_cast<unsigned char>(token[i]) >= 0x80;
    const auto b = stray ? std::nullopt : byte_level_byte(utf8_decode_at(token, i));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    i += n;
  }
  return out;
}

}  // namespace tachyon::tokenizer
