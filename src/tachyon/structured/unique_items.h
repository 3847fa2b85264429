// JSON arrays of distinct items drawn from a few known values (a schema's "uniqueItems": true
// over an enum, a const or booleans) as a grammar. Why a state per set of values written and not
// a check after the fact: a mask must refuse a repeated value the moment it would start, and the
// sets are few (at most 2^8). Every order of distinct values stays open to the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tachyon/structured/grammar.h"

namespace tachyon::structured {

// The most values unique_items takes: 2^8 states.
inline constexpr size_t kMaxUniqueValues = 8;

// "[" v, v, ... "]" with min..max items (max < 0: up to every value), each of `values` (JSON
// texts of pairwise different values) at most once. Throws StructuredError when min is above the
// number of values or there are more than kMaxUniqueValues.
Sequence unique_items(Grammar& g, const std::vector<std::string>& values, int64_t min, int64_t max);

}  // namespace tachyon::structured
