// Number bounds (structured/number_range.h): the grammar of a bounded "number" accepts exactly
// the decimals whose double a validator finds in range, up to the bound's own rounding: every
// accepted string is in range (soundness, checked by strtod and the bound's double, as Python's
// jsonschema compares), and every string in range whose value is not within 1e-9 of a bound is
// accepted (completeness), over hand-picked edges and 20,000 random bounds and numbers.
// ctest -R structured_number_range
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"

namespace tachyon::structured::number_range_test {

std::shared_ptr<const CompiledGrammar> compile(const std::string& schema) {
  std::vector<std::string> tokens = {"", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "-", ".", "e"};
  return std::make_shared<const CompiledGrammar>(
      build_grammar({ConstraintSpec::Kind::kJsonSchema, schema, {}, "json_schema"}),
      std::make_shared<const TokenVocabulary>(tokens, 16), "test");
}

bool matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  Matcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

struct Bounds {
  std::optional<double> minimum, exclusive_minimum, maximum, exclusive_maximum;
  std::string schema() const {
    std::string s = R"({"type":"number")";
    auto add = [&](const char* key, const std::optional<double>& v) {
      if (!v) return;
      char buffer[64];
      std::snprintf(buffer, sizeof(buffer), "%.17g", *v);
      s += std::string(",\"") + key + "\":" + buffer;
    };
    add("minimum", minimum);
    add("exclusiveMinimum", exclusive_minimum);
    add("maximum", maximum);
    add("exclusiveMaximum", exclusive_maximum);
    return s + "}";
  }
  // As a validator reads the text: strtod, then the double comparisons.
  bool valid(const std::string& text) const {
    const double x = std::strtod(text.c_str(), nullptr);
    return (!minimum || x >= *minimum) && (!exclusive_minimum || x > *exclusive_minimum) &&
           (!maximum || x <= *maximum) && (!exclusive_maximum || x < *exclusive_maximum);
  }
  bool near_a_bound(const std::string& text) const {
    const double x = std::strtod(text.c_str(), nullptr);
    for (const auto& b : {minimum, exclusive_minimum, maximum, exclusive_maximum}) {
      if (b && std::fabs(x - *b) <= 1e-9 * std::max(1.0, std::fabs(*b))) return true;
    }
    return false;
  }
};

TEST(StructuredNumberRange, EdgesOfInclusiveExclusiveAndNegativeRanges) {
  const auto unit = compile(R"({"type":"number","minimum":0,"maximum":1})");
  for (const char* ok : {"0", "0.5", "1", "1.0", "1.000", "0.999999", "0.0"}) EXPECT_TRUE(matches(unit, ok)) << ok;
  for (const char* bad : {"1.01", "-0.1", "2", "1.0001", "01", "1e0", "-1"}) EXPECT_FALSE(matches(unit, bad)) << bad;
  const auto open = compile(R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})");
  for (const char* ok : {"0.5", "0.00000000000000000001", "0.99"}) EXPECT_TRUE(matches(open, ok)) << ok;
  for (const char* bad : {"0", "0.0", "1", "-0", "0.000"}) EXPECT_FALSE(matches(open, bad)) << bad;
  const auto negative = compile(R"({"type":"number","minimum":-2.5,"maximum":-1.25})");
  for (const char* ok : {"-2.5", "-1.25", "-1.3", "-2", "-2.4999"}) EXPECT_TRUE(matches(negative, ok)) << ok;
  for (const char* bad : {"-1.2", "-2.51", "-1", "-3", "0", "1.5"}) EXPECT_FALSE(matches(negative, bad)) << bad;
  const auto low = compile(R"({"type":"number","minimum":0.1})");
  for (const char* ok : {"0.1", "0.10", "5", "123.4", "0.11"}) EXPECT_TRUE(matches(low, ok)) << ok;
  for (const char* bad : {"0.09", "0", "-5", "0.0999"}) EXPECT_FALSE(matches(low, bad)) << bad;
  const auto high = compile(R"({"type":"number","maximum":-3})");
  for (const char* ok : {"-3", "-3.0", "-1000.5", "-3.01"}) EXPECT_TRUE(matches(high, ok)) << ok;
  for (const char* bad : {"-2.9", "0", "-2.99999"}) EXPECT_FALSE(matches(high, bad)) << bad;
  const auto straddle = compile(R"({"type":"number","minimum":-0.5,"exclusiveMaximum":10.25})");
  for (const char* ok : {"-0.5", "0", "10.2", "10.24999", "3"}) EXPECT_TRUE(matches(straddle, ok)) << ok;
  for (const char* bad : {"10.25", "10.3", "-0.51", "11"}) EXPECT_FALSE(matches(straddle, bad)) << bad;
  EXPECT_THROW(compile(R"({"type":"number","minimum":2,"maximum":1})"), StructuredError);
  EXPECT_THROW(compile(R"({"type":"number","exclusiveMinimum":1,"exclusiveMaximum":1})"), StructuredError);
  EXPECT_THROW(compile(R"({"type":"number","minimum":1e300})"), StructuredError);
}

// Random bounds (integers, short decimals, fractions of long expansion, both signs) against
// random decimal strings: accepted implies valid, always; valid implies accepted away from the
// bounds' rounding.
TEST(StructuredNumberRange, AcceptedIsValidAndValidIsAcceptedAwayFromTheBounds) {
  std::mt19937_64 rng(61);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  auto random_bound = [&]() -> double {
    switch (pick(4)) {
      case 0: return pick(2001) - 1000;
      case 1: return (pick(200001) - 100000) / 100.0;
      case 2: return (pick(2001) - 1000) / 7.0;
      default: return std::ldexp(static_cast<double>(pick(1 << 20)) - (1 << 19), -pick(30));
    }
  };
  auto random_number = [&](double around) {
    std::string text;
    double x = around + (pick(3) == 0 ? 0.0 : (static_cast<double>(pick(2000001)) - 1000000) / std::pow(10.0, pick(8)));
    if (pick(8) == 0) x = std::round(x);
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "%.*f", pick(10), x);
    text = buffer;
    if (text == "-0" || text.rfind("-0.", 0) == 0) text = pick(2) ? text.substr(1) : text;
    return text;
  };
  int accepted = 0, checked = 0;
  for (int schema_index = 0; schema_index < 400; ++schema_index) {
    Bounds b;
    double x = random_bound(), y = random_bound();
    if (x > y) std::swap(x, y);
    if (pick(4) != 0) (pick(2) ? b.minimum : b.exclusive_minimum) = x;
    if (pick(4) != 0) (pick(2) ? b.maximum : b.exclusive_maximum) = y;
    if (!b.minimum && !b.exclusive_minimum && !b.maximum && !b.exclusive_maximum) b.minimum = x;
    std::shared_ptr<const CompiledGrammar> g;
    try {
      g = compile(b.schema());
    } catch (const StructuredError&) {
      EXPECT_TRUE(b.exclusive_minimum && b.exclusive_maximum && x == y) << b.schema();  // an empty range only
      continue;
    }
    for (int i = 0; i < 50; ++i) {
      const std::string text = random_number(pick(2) ? x : y);
      const bool ok = matches(g, text), valid = b.valid(text);
      ++checked;
      accepted += ok;
      ASSERT_TRUE(!ok || valid) << b.schema() << " accepted " << text;
      if (valid && !b.near_a_bound(text)) {
        ASSERT_TRUE(ok) << b.schema() << " refused " << text;
      }
    }
  }
  std::printf("number ranges: %d of %d random numbers accepted\n", accepted, checked);
  EXPECT_GT(accepted, checked / 5);
}

}  // namespace tachyon::structured::number_range_test
