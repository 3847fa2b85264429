// The bound keywords of a JSON schema (minimum, exclusiveMinimum, maximum, exclusiveMaximum), read
// in one order in one place: the integer and number grammars (json_schema.cpp) and the oneOf
// prover (json_schema_exclusive.cpp), each with its own rounding, go through for_each_bound.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>

#include "tachyon/structured/number_range.h"

namespace tachyon::structured {

// fn(key, lower, exclusive, value) for each bound keyword s has, lower ends first.
template <typename Fn>
void for_each_bound(const nlohmann::ordered_json& s, const Fn& fn) {
  struct Keyword {
    const char* key;
    bool lower, exclusive;
  };
  static constexpr Keyword kKeywords[] = {
      {"minimum", true, false}, {"exclusiveMinimum", true, true}, {"maximum", false, false}, {"exclusiveMaximum", false, true}};
  for (const Keyword& k : kKeywords) {
    if (const auto it = s.find(k.key); it != s.end()) fn(k.key, k.lower, k.exclusive, *it);
  }
}

// The bounds as one interval of doubles: each end the tighter of its two keywords (the exclusive
// one on a tie); values that are not numbers are left out.
struct NumberInterval {
  std::optional<NumberBound> lo, hi;
};
inline NumberInterval number_interval(const nlohmann::ordered_json& s) {
  NumberInterval r;
  for_each_bound(s, [&](const char*, bool lower, bool exclusive, const nlohmann::ordered_json& value) {
    if (!value.is_number()) return;
    const NumberBound b{value.get<double>(), exclusive};
    std::optional<NumberBound>& end = lower ? r.lo : r.hi;
    if (!end || (lower ? b.value > end->value : b.value < end->value) || (b.value == end->value && exclusive)) end = b;
  });
  return r;
}

}  // namespace tachyon::structured
