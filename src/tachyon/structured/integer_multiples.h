// JSON integers that are multiples of k (a schema's "multipleOf" on "type": "integer") within
// bounds, as a grammar. Two constructions, each exact: a bounded range with few multiples lists
// them; otherwise a remainder automaton (a rule per remainder mod k, a digit moving r to
// (10 r + d) mod k) writes every multiple of one sign or both, which covers the bounds that only
// fix a sign (minimum 0, exclusiveMinimum 0, and their mirrors). Other bounds are refused: the
// exact grammar of a far bound crossed with the remainders is not built.
#pragma once

#include <cstdint>
#include <optional>

#include "tachyon/structured/grammar.h"

namespace tachyon::structured {

inline constexpr int64_t kMaxMultipleOf = 1000;      // remainder rules, at most
inline constexpr int64_t kMaxListedMultiples = 1024;  // a bounded range's multiples, listed

// The multiples of k (1 <= k <= kMaxMultipleOf) in [lo, hi] (nullopt: unbounded on that side),
// in JSON's form (no leading zeros, no "-0"). Throws StructuredError naming what is not supported
// or when no multiple is in range.
Sequence integer_multiples(Grammar& g, int64_t k, std::optional<int64_t> lo, std::optional<int64_t> hi);

}  // namespace tachyon::structured
