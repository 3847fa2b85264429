// UTF-8 and Unicode helpers for the tokenizer: lossy repair of invalid UTF-8 (the rule Rust's
// String::from_utf8_lossy follows, so decode matches HF byte for byte), code point iteration,
// NFC through utf8proc and the character classes HF's added-token flags use.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tachyon::tokenizer {

// True when `text` is well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view text);

// Copy of `bytes` where every maximal invalid subpart becomes U+FFFD ("substitution of maximal
// subparts", what from_utf8_lossy does). Valid input comes back unchanged.
std::string utf8_lossy(std::string_view bytes);

// Byte length of the code point that starts at text[pos] in valid UTF-8 (1 for a stray byte).
std::size_t utf8_char_len(std::string_view text, std::size_t pos);

// Code point starting at text[pos] in valid UTF-8.
char32_t utf8_decode_at(std::string_view text, std::size_t pos);

void utf8_append(std::string& out, char32_t cp);

// Unicode canonical composition (NFC) of valid UTF-8.
std::string nfc(std::string_view text);

// Unicode White_Space, as Rust's char::is_whitespace.
bool is_whitespace(char32_t cp);

// Letters, marks, decimal digits and connector punctuation: Rust regex's \w, which HF uses to
// decide whether an added token with single_word=true sits inside a word.
bool is_word_char(char32_t cp);

}  // namespace tachyon::tokenizer
