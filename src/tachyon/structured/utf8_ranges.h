// Character classes as byte sequences: a set of Unicode code points becomes a rule that matches
// exactly one well-formed UTF-8 encoding of a member (no surrogates, no overlong forms). This is
// how a character-level constraint (a JSON string's characters, a regex class, '.') lives in a
// byte grammar. The split follows RE2's: cut each range where its encodings change length or
// where a continuation byte's range would not be a plain [lo-hi] per position.
#pragma once

#include <cstdint>
#include <string>
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

// The UTF-8 bytes of one code point.
std::string utf8_encode(uint32_t cp);

}  // namespace tachyon::structured
