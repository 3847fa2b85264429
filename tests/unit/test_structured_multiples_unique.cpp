// multipleOf on integers (structured/integer_multiples.h) and uniqueItems over a few values
// (structured/unique_items.h): every integer of a window is accepted exactly when it is a
// multiple in range; every array over the values is accepted exactly when its items are distinct
// and its length within bounds. ctest -R StructuredMultiplesUnique
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "structured_byte_grammar.h"

namespace tachyon::structured::multiples_unique_test {

std::shared_ptr<const CompiledGrammar> compile(const std::string& schema) {
  return testing::compile_schema_over_bytes(schema);
}
bool matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  return testing::matches_whole(g, text);
}

using Bound = std::optional<int64_t>;

void expect_exact_multiples(int64_t k, Bound lo, Bound hi, int64_t window) {
  nlohmann::json schema = {{"type", "integer"}, {"multipleOf", k}};
  if (lo) schema["minimum"] = *lo;
  if (hi) schema["maximum"] = *hi;
  SCOPED_TRACE(schema.dump());
  const auto g = compile(schema.dump());
  for (int64_t v = -window; v <= window; ++v) {
    const bool in = v % k == 0 && (!lo || v >= *lo) && (!hi || v <= *hi);
    ASSERT_EQ(matches(g, std::to_string(v)), in) << v;
  }
  for (const char* bad : {"-0", "00", "05", "-05", "+5", "5.0", "1e1"}) EXPECT_FALSE(matches(g, bad)) << bad;
}

TEST(StructuredMultiplesUnique, MultipleOfAcceptsExactlyTheMultiplesInRange) {
  for (int64_t k : {1, 2, 3, 5, 7, 10, 12, 25, 64, 99, 1000}) {
    expect_exact_multiples(k, {}, {}, 3000);
    expect_exact_multiples(k, 0, {}, 3000);          // non-negative
    expect_exact_multiples(k, 1, {}, 3000);          // positive
    expect_exact_multiples(k, 1 - k, {}, 3000);      // still non-negative: the first multiple is 0
    expect_exact_multiples(k, {}, 0, 3000);
    expect_exact_multiples(k, {}, -1, 3000);
    expect_exact_multiples(k, {}, k - 1, 3000);
    if (k >= 3) expect_exact_multiples(k, -1234, 987, 3000);  // listed: at most 1024 multiples
  }
  // Random bounded ranges of few multiples, and random sign-only bounds.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 60; ++i) {
    const int64_t k = 1 + static_cast<int64_t>(rng() % 40);
    const int64_t lo = static_cast<int64_t>(rng() % 2000) - 1000;
    const int64_t hi = lo + static_cast<int64_t>(rng() % 600);
    bool any = false;
    for (int64_t v = lo; v <= hi; ++v) any = any || v % k == 0;
    if (!any) {
      const std::string text = nlohmann::json{{"type", "integer"}, {"multipleOf", k}, {"minimum", lo}, {"maximum", hi}}.dump();
      EXPECT_THROW(build_grammar({ConstraintSpec::Kind::kJsonSchema, text, {}, "json_schema"}), StructuredError) << text;
    } else if ((hi / k) - (lo / k) < 1000) {
      expect_exact_multiples(k, lo, hi, 1200);
    }
  }
  // Exclusive bounds and a whole-number float.
  const auto g = compile(R"({"type":"integer","multipleOf":5.0,"exclusiveMinimum":0})");
  EXPECT_TRUE(matches(g, "5"));
  EXPECT_FALSE(matches(g, "0"));
  EXPECT_FALSE(matches(g, "-5"));
  EXPECT_TRUE(matches(g, "123456789012345"));
}

TEST(StructuredMultiplesUnique, MultipleOfRefusesWhatItCannotWriteExactly) {
  for (const char* text : {
           R"({"type":"integer","multipleOf":0.5})",                    // fractional
           R"({"type":"integer","multipleOf":0})", R"({"type":"integer","multipleOf":-5})",
           R"({"type":"integer","multipleOf":"5"})", R"({"type":"integer","multipleOf":1001})",
           R"({"type":"number","multipleOf":5})", R"({"multipleOf":5})",
           R"({"type":"integer","multipleOf":5,"minimum":100})",        // a far bound, unbounded above
           R"({"type":"integer","multipleOf":5,"minimum":0,"maximum":1000000})",  // 200,001 multiples
           R"({"type":"integer","multipleOf":5,"minimum":1,"maximum":4})"}) {      // none
    EXPECT_THROW(build_grammar({ConstraintSpec::Kind::kJsonSchema, text, {}, "json_schema"}), StructuredError) << text;
  }
}

// Every array of up to max_len items over `items` (JSON texts) against the rule: distinct items,
// length in [min, max].
void expect_exact_unique(const std::string& schema, const std::vector<std::string>& items, int64_t min, int64_t max,
                         int max_len, bool unique = true) {
  SCOPED_TRACE(schema);
  const auto g = compile(schema);
  std::vector<std::vector<int>> arrays = {{}};
  for (int len = 1; len <= max_len; ++len) {
    std::vector<std::vector<int>> next;
    for (const auto& a : arrays) {
      if (static_cast<int>(a.size()) != len - 1) continue;
      for (int i = 0; i < static_cast<int>(items.size()); ++i) {
        auto b = a;
        b.push_back(i);
        next.push_back(b);
      }
    }
    arrays.insert(arrays.end(), next.begin(), next.end());
  }
  for (const auto& a : arrays) {
    std::string text = "[";
    bool distinct = true;
    for (size_t j = 0; j < a.size(); ++j) {
      text += (j ? ", " : "") + items[a[j]];
      for (size_t i = 0; i < j; ++i) distinct = distinct && a[i] != a[j];
    }
    text += "]";
    const auto n = static_cast<int64_t>(a.size());
    ASSERT_EQ(matches(g, text), (distinct || !unique) && n >= min && (max < 0 || n <= max)) << text;
  }
}

TEST(StructuredMultiplesUnique, UniqueItemsAcceptsExactlyTheDistinctArrays) {
  expect_exact_unique(R"({"type":"array","items":{"enum":["a","b","c"]},"uniqueItems":true})", {"\"a\"", "\"b\"", "\"c\""},
                      0, -1, 4);
  expect_exact_unique(R"({"type":"array","items":{"type":"string","enum":["a","b","c","d"]},"uniqueItems":true,
                          "minItems":2,"maxItems":3})", {"\"a\"", "\"b\"", "\"c\"", "\"d\""}, 2, 3, 5);
  expect_exact_unique(R"({"items":{"type":"boolean"},"uniqueItems":true})", {"true", "false"}, 0, -1, 3);
  expect_exact_unique(R"({"$defs":{"c":{"enum":[1,2,{"k":[1]}]}},"type":"array","items":{"$ref":"#/$defs/c"},
                          "uniqueItems":true,"minItems":1})", {"1", "2", R"({"k":[1]})"}, 1, -1, 4);
  // uniqueItems false and maxItems 1 constrain nothing more.
  expect_exact_unique(R"({"type":"array","items":{"enum":["a","b"]},"uniqueItems":false,"maxItems":3})",
                      {"\"a\"", "\"b\""}, 0, 3, 3, /*unique=*/false);
  const auto one = compile(R"({"type":"array","items":{"type":"string"},"uniqueItems":true,"maxItems":1})");
  EXPECT_TRUE(matches(one, R"(["x"])"));
  // Values JSON Schema holds equal are written once: 1 and 1.0, objects with their keys reordered.
  const auto equal = compile(R"({"type":"array","items":{"enum":[1,1.0,{"a":1,"b":2},{"b":2,"a":1}]},"uniqueItems":true})");
  EXPECT_TRUE(matches(equal, R"([1, {"a":1,"b":2}])"));
  EXPECT_FALSE(matches(equal, R"([1, 1.0])"));
  EXPECT_FALSE(matches(equal, R"([{"a":1,"b":2}, {"b":2,"a":1}])"));
  EXPECT_FALSE(matches(equal, R"([{"b":2,"a":1}])"));
}

TEST(StructuredMultiplesUnique, UniqueItemsRefusesWhatItCannotKeepDistinct) {
  for (const char* text : {
           R"({"type":"array","uniqueItems":true})", R"({"type":"array","items":{"type":"string"},"uniqueItems":true})",
           R"({"type":"array","items":{"enum":[1,2,3,4,5,6,7,8,9]},"uniqueItems":true})",
           R"({"type":"array","items":{"enum":["a","b"]},"uniqueItems":true,"minItems":3})",
           R"({"type":"array","prefixItems":[{"const":1}],"items":{"const":1},"uniqueItems":true})",
           R"({"type":"array","items":{"enum":["a"]},"uniqueItems":"yes"})"}) {
    EXPECT_THROW(build_grammar({ConstraintSpec::Kind::kJsonSchema, text, {}, "json_schema"}), StructuredError) << text;
  }
}

}  // namespace tachyon::structured::multiples_unique_test
