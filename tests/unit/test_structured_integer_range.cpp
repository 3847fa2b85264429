// Integer bounds in JSON schemas (structured/integer_range.h): for many ranges, open or closed at
// either end, every integer from -1200 to 1200 (and the int64 extremes) is accepted exactly when
// it is in range, and never with a leading zero or as "-0". ctest -R structured_integer_range
#include <gtest/gtest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "structured_byte_grammar.h"

namespace tachyon::structured::integer_range_test {

std::shared_ptr<const CompiledGrammar> compile(const std::string& schema) {
  return testing::compile_schema_over_bytes(schema);
}
bool matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  return testing::matches_whole(g, text);
}

TEST(StructuredIntegerRange, AcceptsExactlyTheIntegersInRange) {
  using Bound = std::optional<int64_t>;
  const std::vector<std::pair<Bound, Bound>> ranges = {
      {0, 100},  {1, 9},     {-5, 120}, {-1000, -7}, {7, 7},   {0, 0},       {-1, 0},      {10, 999}, {123, 4567},
      {99, 101}, {-99, 99},  {5, {}},   {{}, -3},    {{}, 250}, {-250, {}},  {0, {}},      {{}, 0},   {1000, {}},
      {-1024, 1024}, {19, 1181}, {-1181, -19}};
  for (const auto& [lo, hi] : ranges) {
    nlohmann::json schema = {{"type", "integer"}};
    if (lo) schema["minimum"] = *lo;
    if (hi) schema["maximum"] = *hi;
    SCOPED_TRACE(schema.dump());
    const auto g = compile(schema.dump());
    for (int64_t v = -1200; v <= 1200; ++v) {
      const bool in = (!lo || v >= *lo) && (!hi || v <= *hi);
      ASSERT_EQ(matches(g, std::to_string(v)), in) << v;
    }
    EXPECT_EQ(matches(g, "123456789012"), !hi) << "a long number";
    EXPECT_EQ(matches(g, "-123456789012"), !lo);
    EXPECT_FALSE(matches(g, "-0"));
    EXPECT_FALSE(matches(g, "007"));
    EXPECT_FALSE(matches(g, "1.0"));
  }
}

TEST(StructuredIntegerRange, ExclusiveAndFractionalBoundsAndExtremes) {
  const auto g = compile(R"({"type":"integer","exclusiveMinimum":-3,"exclusiveMaximum":7.5})");
  EXPECT_FALSE(matches(g, "-3"));
  EXPECT_TRUE(matches(g, "-2"));
  EXPECT_TRUE(matches(g, "7"));
  EXPECT_FALSE(matches(g, "8"));
  const auto frac = compile(R"({"type":"integer","minimum":2.5,"maximum":4.0})");
  EXPECT_FALSE(matches(frac, "2"));
  EXPECT_TRUE(matches(frac, "3"));
  EXPECT_TRUE(matches(frac, "4"));
  const auto wide = compile(R"({"type":"integer","minimum":-9223372036854775808,"maximum":9223372036854775807})");
  EXPECT_TRUE(matches(wide, "9223372036854775807"));
  EXPECT_TRUE(matches(wide, "-9223372036854775808"));
  EXPECT_FALSE(matches(wide, "9223372036854775808"));
  EXPECT_FALSE(matches(wide, "-9223372036854775809"));
  // Inside an object, beside a null alternative (bounds do not apply to null).
  const auto object = compile(R"({"type":"object","properties":{"n":{"type":["integer","null"],"minimum":1,"maximum":3}},"required":["n"]})");
  EXPECT_TRUE(matches(object, R"({"n": 2})"));
  EXPECT_TRUE(matches(object, R"({"n": null})"));
  EXPECT_FALSE(matches(object, R"({"n": 4})"));
}

}  // namespace tachyon::structured::integer_range_test
