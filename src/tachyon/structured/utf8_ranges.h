// Character classes as byte sequences: a set of Unicode code points becomes a rule that matches
// exactly one well-formed UTF-8 encoding of a member (no surrogates, no overlong forms). This is
// how a character-level constraint (a JSON string's characters, a regex class, '.') lives in a
// byte grammar. The split follows RE2's: cut each range where its encodings change length or
// where a continuation byte's range would not be a plain [lo-hi] per position.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tachyon/structured/grammar.h"

namespace tachyon::structured {

using CodepointRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive [lo, hi]

inline constexpr uint32_t kMaxCodepoint = 0x10FFFF;

// Sorted, merged, clipped to [0, 0x10FFFF], surrogates removed.
CodepointRanges normalize_ranges(CodepointRanges ranges);
// [0, 0x10FFFF] minus `ranges` (normalized).
CodepointRanges complement_ranges(const CodepointRanges& ranges);

// A sequence matching one character of `ranges` (one byte set when all are ASCII; else a
// reference to a new rule named `name`). Throws StructuredError when the set is empty.
Sequence utf8_class(Grammar& grammar, const CodepointRanges& ranges, const std::string& name);

// The UTF-8 bytes of one code point (tokenizer::utf8_append).
std::string utf8_encode(uint32_t cp);

// The code point whose encoding starts at text[pos], advancing pos past it; nullopt (pos
// unchanged) for a byte that starts no sequence or a sequence cut short by the end. What the
// grammar parsers (EBNF, regex) read their literal text with.
std::optional<uint32_t> utf8_decode_next(std::string_view text, size_t& pos);

// The value of one hex digit (either case), or -1.
int hex_digit_value(char c);

}  // namespace tachyon::structured
