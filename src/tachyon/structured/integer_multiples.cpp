#include "tachyon/structured/integer_multiples.h"

#include <string>
#include <vector>

namespace tachyon::structured {
namespace {

// floor(a / k) and ceil(a / k) for k > 0, in 128 bits so that INT64_MIN / 1 cannot overflow.
__int128 floor_div(__int128 a, int64_t k) { return a >= 0 ? a / k : -((-a + k - 1) / k); }
__int128 ceil_div(__int128 a, int64_t k) { return -floor_div(-a, k); }

// The positive multiples of k: a first digit 1-9, then digits, the remainder 0 at the end.
Sequence positive_multiples(Grammar& g, int64_t k) {
  std::vector<int32_t> rules(static_cast<size_t>(k));
  for (int64_t r = 0; r < k; ++r) rules[r] = g.add_rule("multiple_rest_" + std::to_string(r));
  // rest[r]: the digits that follow a prefix of remainder r; digits leading to one remainder
  // share an alternative (a byte set).
  for (int64_t r = 0; r < k; ++r) {
    if (r == 0) g.add_alternative(rules[r], Sequence{});
    std::vector<ByteSet> to(static_cast<size_t>(k));
    for (int d = 0; d <= 9; ++d) to[(10 * r + d) % k].set(static_cast<uint8_t>('0' + d));
    for (int64_t next = 0; next < k; ++next) {
      if (!to[next].empty()) g.add_alternative(rules[r], concat({g.bytes(to[next]), Grammar::ref(rules[next])}));
    }
  }
  std::vector<ByteSet> first(static_cast<size_t>(k));
  for (int d = 1; d <= 9; ++d) first[d % k].set(static_cast<uint8_t>('0' + d));
  std::vector<Sequence> alternatives;
  for (int64_t r = 0; r < k; ++r) {
    if (!first[r].empty()) alternatives.push_back(concat({g.bytes(first[r]), Grammar::ref(rules[r])}));
  }
  return Grammar::ref(g.rule_of("positive_multiple", alternatives));
}

}  // namespace

Sequence integer_multiples(Grammar& g, int64_t k, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (k < 1 || k > kMaxMultipleOf) {
    throw StructuredError("'multipleOf' on integers is supported from 1 to " + std::to_string(kMaxMultipleOf));
  }
  const __int128 first = lo ? ceil_div(*lo, k) : 0, last = hi ? floor_div(*hi, k) : 0;  // multiples / k
  if (lo && hi && first > last) {
    throw StructuredError("no multiple of " + std::to_string(k) + " lies within the bounds");
  }
  if (lo && hi && last - first + 1 <= kMaxListedMultiples) {
    std::vector<Sequence> alternatives;
    for (__int128 m = first; m <= last; ++m) {
      alternatives.push_back(g.literal(std::to_string(static_cast<int64_t>(m * k))));
    }
    return Grammar::ref(g.rule_of("multiples", alternatives));
  }
  // Bounds that only fix a sign: below, none (negatives too), "0 and up" or "1 and up" in
  // multiples of k; above, mirrored.
  const bool negatives = !lo, positives = !hi;
  const bool zero = (!lo || first <= 0) && (!hi || last >= 0);
  if ((lo && first != 0 && first != 1) || (hi && last != 0 && last != -1)) {
    throw StructuredError("'multipleOf' with bounds is supported when the bounds hold at most " +
                          std::to_string(kMaxListedMultiples) + " multiples or only fix the sign (e.g. minimum 0)");
  }
  const Sequence positive = positive_multiples(g, k);
  std::vector<Sequence> alternatives;
  if (zero) alternatives.push_back(g.literal("0"));
  if (positives) alternatives.push_back(positive);
  if (negatives) alternatives.push_back(concat({g.literal("-"), positive}));
  return Grammar::ref(g.rule_of("multiples", alternatives));
}

}  // namespace tachyon::structured
