// JSON integers within bounds (a schema's minimum / maximum / exclusiveMinimum /
// exclusiveMaximum on "type": "integer") as a grammar: the decimal strings, in JSON's form (no
// leading zeros, no "-0"), of exactly the integers in [lo, hi], either end open. Why a grammar of
// digit strings and not a check after the fact: a mask must refuse a digit the moment no number
// it could start is in range. The construction is the classic range-to-regex split: numbers of
// each length apart, and within one length the digits of the two ends compared from the left
// (a shared prefix, then the low end's tail, the digits strictly between, the high end's tail).
#pragma once

#include <cstdint>
#include <optional>

#include "tachyon/structured/grammar.h"

namespace tachyon::structured {

// Throws StructuredError when lo > hi (no integer matches).
Sequence integer_range(Grammar& g, std::optional<int64_t> lo, std::optional<int64_t> hi);

// The unsigned decimal strings (no leading zeros) of exactly the integers in [lo, hi]; hi
// nullopt: unbounded. lo <= hi. (The integer part of number_range.h's numbers.)
Sequence magnitude_range(Grammar& g, uint64_t lo, std::optional<uint64_t> hi);

}  // namespace tachyon::structured
