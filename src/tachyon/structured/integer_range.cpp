#include "tachyon/structured/integer_range.h"

#include <string>

namespace tachyon::structured {
namespace {

class RangeBuilder {
 public:
  explicit RangeBuilder(Grammar& g) : g_(g) {}

  // Magnitudes (no sign) in [lo, hi]; hi nullopt: unbounded. lo >= 0.
  Sequence magnitudes(uint64_t lo, std::optional<uint64_t> hi) {
    const std::string a = std::to_string(lo);
    std::vector<Sequence> alternatives;
    const size_t top_length = hi ? std::to_string(*hi).size() : a.size();
    for (size_t n = a.size(); n <= top_length; ++n) {
      const std::string low = n == a.size() ? a : "1" + std::string(n - 1, '0');
      const std::string high = hi && n == top_length ? std::to_string(*hi) : std::string(n, '9');
      alternatives.push_back(same_length(low, high));
    }
    if (!hi) {  // every longer number: [1-9] and at least a.size() more digits
      alternatives.push_back(concat({g_.bytes(ByteSet::range('1', '9')), g_.repeat(digit(), static_cast<int64_t>(a.size()), -1, "int_digits")}));
    }
    return Grammar::ref(g_.rule_of("int_range", alternatives));
  }

 private:
  Sequence digit() { return g_.bytes(ByteSet::range('0', '9')); }

  // The n-digit strings s with x <= s <= y (both n digits).
  Sequence same_length(const std::string& x, const std::string& y) {
    if (x.empty()) return {};
    if (x == y) return g_.literal(x);
    if (x[0] == y[0]) return concat({g_.literal(x.substr(0, 1)), same_length(x.substr(1), y.substr(1))});
    const size_t rest = x.size() - 1;
    const bool x_rest_min = x.substr(1) == std::string(rest, '0');
    const bool y_rest_max = y.substr(1) == std::string(rest, '9');
    auto any_rest = [&] { return g_.repeat(digit(), static_cast<int64_t>(rest), static_cast<int64_t>(rest), "int_any"); };
    std::vector<Sequence> alternatives;
    const char first = x_rest_min ? x[0] : static_cast<char>(x[0] + 1);
    const char last = y_rest_max ? y[0] : static_cast<char>(y[0] - 1);
    if (!x_rest_min) alternatives.push_back(concat({g_.literal(x.substr(0, 1)), same_length(x.substr(1), std::string(rest, '9'))}));
    if (first <= last) {
      alternatives.push_back(concat({g_.bytes(ByteSet::range(static_cast<uint8_t>(first), static_cast<uint8_t>(last))), any_rest()}));
    }
    if (!y_rest_max) alternatives.push_back(concat({g_.literal(y.substr(0, 1)), same_length(std::string(rest, '0'), y.substr(1))}));
    return Grammar::ref(g_.rule_of("int_digits", alternatives));
  }

  Grammar& g_;
};

uint64_t magnitude(int64_t v) { return v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v); }

}  // namespace

Sequence integer_range(Grammar& g, std::optional<int64_t> lo, std::optional<int64_t> hi) {
  if (lo && hi && *lo > *hi) {
    throw StructuredError("the bounds leave no integer (" + std::to_string(*lo) + " > " + std::to_string(*hi) + ")");
  }
  RangeBuilder builder(g);
  std::vector<Sequence> alternatives;
  // Negative numbers: "-" and a magnitude in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const uint64_t low = hi && *hi < 0 ? magnitude(*hi) : 1;
    std::optional<uint64_t> high;
    if (lo) high = magnitude(*lo);
    alternatives.push_back(concat({g.literal("-"), builder.magnitudes(low, high)}));
  }
  // Zero and up: [max(0, lo), hi].
  if (!hi || *hi >= 0) {
    const uint64_t low = lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0;
    alternatives.push_back(builder.magnitudes(low, hi ? std::optional<uint64_t>(static_cast<uint64_t>(*hi)) : std::nullopt));
  }
  return Grammar::ref(g.rule_of("integer_range", alternatives));
}

Sequence magnitude_range(Grammar& g, uint64_t lo, std::optional<uint64_t> hi) {
  return RangeBuilder(g).magnitudes(lo, hi);
}

}  // namespace tachyon::structured
