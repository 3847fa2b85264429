#include "tachyon/structured/unique_items.h"

#include <functional>
#include <map>

#include "tachyon/structured/grammar.h"

namespace tachyon::structured {

Sequence unique_items(Grammar& g, const std::vector<std::string>& values, int64_t min, int64_t max) {
  const auto n = static_cast<int64_t>(values.size());
  if (values.size() > kMaxUniqueValues) {
    throw StructuredError("'uniqueItems' over more than " + std::to_string(kMaxUniqueValues) + " values is not supported");
  }
  if (min > n) {
    throw StructuredError("'minItems' asks for " + std::to_string(min) + " distinct items but the items allow " +
                          std::to_string(n) + " values");
  }
  if (max < 0 || max > n) max = n;
  // after(written): the items that may follow once the values in the bit set `written` are out,
  // then "]". Memoized: a set reached in any order shares its rule.
  std::map<uint32_t, Sequence> rules;
  std::function<Sequence(uint32_t)> after = [&](uint32_t written) -> Sequence {
    if (const auto it = rules.find(written); it != rules.end()) return it->second;
    const int64_t c = __builtin_popcount(written);
    std::vector<Sequence> alternatives;
    if (c >= min) alternatives.push_back(g.literal("]"));
    for (int64_t i = 0; c < max && i < n; ++i) {
      if (written >> i & 1) continue;
      alternatives.push_back(concat({g.literal(", "), g.literal(values[i]), after(written | 1u << i)}));
    }
    const Sequence rule = Grammar::ref(g.rule_of("unique_items", alternatives));
    rules.emplace(written, rule);
    return rule;
  };
  std::vector<Sequence> alternatives;
  if (min == 0) alternatives.push_back(g.literal("[]"));
  for (int64_t i = 0; max > 0 && i < n; ++i) {
    alternatives.push_back(concat({g.literal("["), g.literal(values[i]), after(1u << i)}));
  }
  return Grammar::ref(g.rule_of("unique_array", alternatives));
}

}  // namespace tachyon::structured
