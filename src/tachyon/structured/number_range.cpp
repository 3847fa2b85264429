#include "tachyon/structured/number_range.h"

#include <charconv>
#include <cmath>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "tachyon/structured/integer_range.h"

namespace tachyon::structured {
namespace {

constexpr double kLimit = 9007199254740992.0;  // 2^53
constexpr size_t kMaxFractionDigits = 20;

// A nonnegative decimal: integer part and fraction digits (no trailing zeros).
struct Decimal {
  uint64_t integer = 0;
  std::string fraction;
};

// |v| as the shortest decimal that reads back as v, its fraction cut to kMaxFractionDigits
// digits toward zero (`up`: away from zero, by one unit in the last place kept).
Decimal decimal_of(double v, bool up) {
  char buffer[512];
  const auto [end, error] = std::to_chars(buffer, buffer + sizeof(buffer), std::fabs(v), std::chars_format::fixed);
  std::string text(buffer, error == std::errc() ? end : buffer);
  const size_t point = text.find('.');
  Decimal d;
  d.integer = std::stoull(text.substr(0, point));
  if (point != std::string::npos) d.fraction = text.substr(point + 1);
  if (d.fraction.size() > kMaxFractionDigits) {
    d.fraction.resize(kMaxFractionDigits);
    if (up) {  // add one unit of the last digit kept
      size_t i = d.fraction.size();
      while (i > 0 && d.fraction[i - 1] == '9') d.fraction[--i] = '0';
      if (i == 0) {
        ++d.integer;
      } else {
        ++d.fraction[i - 1];
      }
    }
  }
  while (!d.fraction.empty() && d.fraction.back() == '0') d.fraction.pop_back();
  return d;
}

bool operator<(const Decimal& a, const Decimal& b) {
  if (a.integer != b.integer) return a.integer < b.integer;
  return a.fraction < b.fraction;  // digit strings without trailing zeros compare as decimals
}

// Fraction digit strings F (after the point) with lo <= .F <= hi, built a digit at a time. A
// bound's state: free (met already), digits still to compare, or (hi only) met exactly, so that
// every further digit must be 0.
class FractionBuilder {
 public:
  explicit FractionBuilder(Grammar& g) : g_(g) {}

  // "" (no fraction) when 0 is in range, or "." and one or more digits in range.
  Sequence fraction(const std::string& lo, std::optional<std::string> hi) {
    std::vector<Sequence> alternatives;
    if (lo.empty()) alternatives.push_back({});  // no fraction: the integer part itself
    const Sequence digits = nonempty(lo, hi ? State{*hi, false} : State{"", true});
    if (!digits.empty()) alternatives.push_back(concat({g_.literal("."), digits}));
    return Grammar::ref(g_.rule_of("number_fraction", alternatives));
  }

 private:
  // The hi bound: `free` (met), or the digits left to compare ("" once met exactly: zeros only).
  struct State {
    std::string digits;
    bool free;
  };

  // One or more digits with lo <= .F <= hi (lo "": met; hi as State). Empty: none. Each step
  // shortens a bound's digits, but for the two states that repeat themselves.
  Sequence nonempty(const std::string& lo, const State& hi) {
    if (lo.empty() && hi.free) return g_.repeat(g_.bytes(ByteSet::range('0', '9')), 1, -1, "fraction_any");
    if (lo.empty() && hi.digits.empty()) return g_.repeat(g_.literal("0"), 1, -1, "fraction_zeros");
    const std::string key = lo + "|" + (hi.free ? "*" : hi.digits);
    if (const auto it = rules_.find(key); it != rules_.end()) return Grammar::ref(it->second);
    std::vector<Sequence> alternatives;
    // Consecutive first digits that lead to the same states share a byte range.
    int first = -1;
    std::string group_lo;
    std::optional<State> group_hi;
    auto flush = [&](int last) {
      if (first < 0) return;
      const Sequence byte =
          g_.bytes(ByteSet::range(static_cast<uint8_t>('0' + first), static_cast<uint8_t>('0' + last)));
      alternatives.push_back(concat({byte, rest(group_lo, *group_hi)}));
      first = -1;
    };
    for (int c = 0; c <= 9; ++c) {
      const char ch = static_cast<char>('0' + c);
      // lo after c: met (c above its digit, or its last digit matched), else its remaining digits.
      if (!lo.empty() && ch < lo[0]) {
        flush(c - 1);
        continue;
      }
      const std::string next_lo = lo.empty() || ch > lo[0] ? "" : lo.substr(1);
      State next_hi{"", true};
      if (!hi.free) {
        if (hi.digits.empty()) {  // met exactly: only zeros follow
          if (ch != '0') {
            flush(c - 1);
            continue;
          }
          next_hi = State{"", false};
        } else if (ch > hi.digits[0]) {
          flush(c - 1);
          continue;
        } else if (ch == hi.digits[0]) {
          next_hi = State{hi.digits.substr(1), false};
        }
      }
      const bool same = first >= 0 && group_lo == next_lo && group_hi->free == next_hi.free &&
                        group_hi->digits == next_hi.digits;
      if (!same) {
        flush(c - 1);
        first = c;
        group_lo = next_lo;
        group_hi = next_hi;
      }
    }
    flush(9);
    if (alternatives.empty()) return {};
    const int32_t rule = g_.rule_of("fraction_digits", alternatives);
    rules_.emplace(key, rule);
    return Grammar::ref(rule);
  }

  // Zero or more digits after a first one: none when lo is met (.F then equals what was read,
  // which is >= lo), else one or more in range.
  Sequence rest(const std::string& lo, const State& hi) {
    std::vector<Sequence> alternatives;
    if (lo.empty()) alternatives.push_back({});
    const Sequence more = nonempty(lo, hi);
    if (!more.empty()) alternatives.push_back(more);
    return Grammar::ref(g_.rule_of("fraction_rest", alternatives));
  }

  Grammar& g_;
  std::map<std::string, int32_t> rules_;
};

// Magnitudes (no sign) m with a <= m <= b (b nullopt: unbounded), as "I" or "I.F".
Sequence magnitudes(Grammar& g, const Decimal& a, const std::optional<Decimal>& b) {
  FractionBuilder fractions(g);
  if (b && a.integer == b->integer) {
    return concat({g.literal(std::to_string(a.integer)), fractions.fraction(a.fraction, b->fraction)});
  }
  std::vector<Sequence> alternatives;
  alternatives.push_back(concat({g.literal(std::to_string(a.integer)), fractions.fraction(a.fraction, std::nullopt)}));
  const std::optional<uint64_t> top = b ? std::optional<uint64_t>(b->integer - 1) : std::nullopt;
  if (!top || a.integer + 1 <= *top) {
    alternatives.push_back(concat({magnitude_range(g, a.integer + 1, top), fractions.fraction("", std::nullopt)}));
  }
  if (b) alternatives.push_back(concat({g.literal(std::to_string(b->integer)), fractions.fraction("", b->fraction)}));
  return Grammar::ref(g.rule_of("number_magnitudes", alternatives));
}

}  // namespace

Sequence number_range(Grammar& g, std::optional<NumberBound> lo, std::optional<NumberBound> hi) {
  std::optional<double> low, high;  // inclusive, as doubles
  for (const auto& [bound, out, toward] : {std::tuple{&lo, &low, INFINITY}, std::tuple{&hi, &high, -INFINITY}}) {
    if (!*bound) continue;
    if (!(std::fabs((*bound)->value) < kLimit)) {
      throw StructuredError("a number bound of 2^53 or more in magnitude is not supported");
    }
    *out = (*bound)->exclusive ? std::nextafter((*bound)->value, toward) : (*bound)->value;
  }
  if (low && high && *low > *high) throw StructuredError("the bounds leave no number");
  // As decimals, rounded inward where cut: the low end up (its magnitude up when positive, down
  // when negative), the high end down.
  std::vector<Sequence> alternatives;
  if (!high || *high >= 0) {  // zero and up: [max(low, 0), high]
    const Decimal a = low && *low > 0 ? decimal_of(*low, /*up=*/true) : Decimal{};
    const std::optional<Decimal> b = high ? std::optional(decimal_of(*high, /*up=*/false)) : std::nullopt;
    if (!b || !(*b < a)) alternatives.push_back(magnitudes(g, a, b));
  }
  if (!low || *low < 0) {  // below zero: "-" and a magnitude in [max(-high, 0), -low]
    const Decimal a = high && *high < 0 ? decimal_of(*high, /*up=*/true) : Decimal{};
    const std::optional<Decimal> b = low ? std::optional(decimal_of(*low, /*up=*/false)) : std::nullopt;
    if (!b || !(*b < a)) alternatives.push_back(concat({g.literal("-"), magnitudes(g, a, b)}));
  }
  if (alternatives.empty()) throw StructuredError("the bounds leave no number with at most 20 fraction digits");
  return Grammar::ref(g.rule_of("number_range", alternatives));
}

}  // namespace tachyon::structured
