// JSON numbers within bounds (a schema's minimum / maximum / exclusiveMinimum / exclusiveMaximum
// on "type": "number") as a grammar of decimal strings without an exponent, so that a mask
// refuses a digit the moment no number it could start is in range.
//
// Every output is in range as a validator reads it (the text parsed to the nearest double, then
// compared with the bound's double): a bound is taken as the shortest decimal that reads back as
// its double (an exclusive bound: as the next double inward), and an output's decimal value is at
// least (at most) that decimal, so its nearest double is too, rounding being monotonic. Outputs
// are the numbers in [lo, hi] as decimals: an integer part (integer_range.h's digits) and
// fraction digits compared with the bound's from the left; a bound's fraction is cut to 20
// digits, inward. Magnitudes of 2^53 and more are refused (doubles there are not all integers).
#pragma once

#include <optional>

#include "tachyon/structured/grammar.h"

namespace tachyon::structured {

struct NumberBound {
  double value;
  bool exclusive;
};

// Throws StructuredError when no number is in range or a bound is not below 2^53 in magnitude.
Sequence number_range(Grammar& g, std::optional<NumberBound> lo, std::optional<NumberBound> hi);

}  // namespace tachyon::structured
