// GPT-2's byte <-> character table. Byte-level BPE vocabularies spell every byte as a printable
// character (space is "Ġ", newline "Ċ"), so any byte string maps to vocabulary symbols and back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tachyon::tokenizer {

// Each byte of `bytes` replaced by its printable character, UTF-8 encoded.
std::string byte_level_encode(std::string_view bytes);

// The byte a table character stands for, or nullopt when `cp` is not in the table.
std::optional<uint8_t> byte_level_byte(char32_t cp);

// The token's bytes when every character is in the table; nullopt otherwise (HF then keeps the
// token's own UTF-8 bytes, which is how added tokens like "<｜User｜>" decode).
std::optional<std::string> byte_level_decode(std::string_view token);

}  // namespace tachyon::tokenizer
