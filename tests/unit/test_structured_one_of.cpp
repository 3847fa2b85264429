// oneOf is compiled only when its branches are provably exclusive (json_schema_exclusive.h); the
// schema corpus checks the accepted ones with Python's jsonschema. These are the cases the corpus
// cannot hold: "nullable" (the grammar writes null, a validator ignores the keyword), numbers
// equal across spellings (1 and 1.0), and recursive schemas whose proof must stop.
// ctest -R structured_one_of
#include <gtest/gtest.h>

#include <string>

#include "tachyon/structured/grammar_compiler.h"

namespace tachyon::structured::one_of_test {

// "" when the schema compiles, else the error.
std::string refusal(const std::string& schema) {
  try {
    build_grammar({ConstraintSpec::Kind::kJsonSchema, schema, {}, "json_schema"});
    return "";
  } catch (const StructuredError& e) {
    return e.what();
  }
}

TEST(StructuredOneOf, NullableBranchOverlapsNull) {
  // The grammar of the first branch writes null, which the second accepts.
  EXPECT_NE(refusal(R"({"oneOf":[{"type":"string","nullable":true},{"type":"null"}]})"), "");
  EXPECT_NE(refusal(R"({"oneOf":[{"type":"object","properties":{"a":{"type":"string","nullable":true}},"required":["a"]},
                                 {"const":{"a":null}}]})"), "");
  EXPECT_EQ(refusal(R"({"oneOf":[{"type":"string"},{"type":"null"}]})"), "");
}

TEST(StructuredOneOf, NumbersCompareByValue) {
  EXPECT_NE(refusal(R"({"oneOf":[{"enum":[1,"a"]},{"const":1.0}]})"), "");
  EXPECT_NE(refusal(R"({"oneOf":[{"type":"integer"},{"const":2.0}]})"), "");
  EXPECT_EQ(refusal(R"({"oneOf":[{"type":"integer"},{"const":2.5}]})"), "");
  EXPECT_EQ(refusal(R"({"oneOf":[{"type":"integer","maximum":1},{"enum":[2,3]}]})"), "");
}

TEST(StructuredOneOf, RecursiveBranchesEndTheProof) {
  // Two recursive shapes that overlap ({"next": null} is both): the proof, which follows the
  // references first, stops at its depth bound and refuses.
  const std::string list = R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#/$defs/%"},{"type":"null"}]}},"required":["next"]})";
  std::string a = list, b = list;
  a.replace(a.find('%'), 1, "a");
  b.replace(b.find('%'), 1, "b");
  const std::string schema = R"({"$defs":{"a":)" + a + R"(,"b":)" + b + R"(},"oneOf":[{"$ref":"#/$defs/a"},{"$ref":"#/$defs/b"}]})";
  EXPECT_NE(refusal(schema).find("oneOf"), std::string::npos) << refusal(schema);
  // Told apart at the top by a discriminator: accepted.
  EXPECT_EQ(refusal(R"({"$defs":{"n":{"type":"object","properties":{"k":{"const":"n"},"c":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["k","c"]}},
                       "oneOf":[{"$ref":"#/$defs/n"},{"type":"object","properties":{"k":{"const":"leaf"}},"required":["k"]}]})"), "");
}

// Large oneOfs: shown exclusive by their values in one pass (a discriminated union; consts),
// else pair by pair up to 512 branches, else refused saying how to fix it. 5,000 branches took a
// request thread 29 s pair by pair.
TEST(StructuredOneOf, ManyBranchesAreShownExclusiveByTheirValues) {
  auto union_of = [](int n, int duplicate_of = -1, bool nullable = false) {
    std::string schema = R"({"oneOf":[)";
    for (int i = 0; i < n; ++i) {
      const int tag = i == n - 1 && duplicate_of >= 0 ? duplicate_of : i;
      schema += (i ? "," : "") + std::string(R"({"type":"object","properties":{"kind":{"type":"string","const":"k)") +
                std::to_string(tag) + R"("},"v":{"type":"integer"}},"required":["kind"])" +
                (nullable ? R"(,"nullable":true)" : "") + "}";
    }
    return schema + "]}";
  };
  EXPECT_EQ(refusal(union_of(5000)), "");
  EXPECT_NE(refusal(union_of(5000, 17)), "") << "two branches with one const";
  EXPECT_NE(refusal(union_of(300, 17)).find("branches 17 and 299"), std::string::npos) << refusal(union_of(300, 17));
  EXPECT_NE(refusal(union_of(3, -1, true)), "") << "nullable branches both write null";
  std::string consts = R"({"oneOf":[)";
  for (int i = 0; i < 5000; ++i) consts += (i ? "," : "") + std::string(R"({"enum":[)") + std::to_string(2 * i) + ",\"" +
                                          std::to_string(i) + "\"]}";
  EXPECT_EQ(refusal(consts + "]}"), "");
  EXPECT_NE(refusal(consts + R"(,{"const":2.0}]})"), "") << "2 and 2.0 are one value";
  // Exclusive only by disjoint ranges: pair by pair, up to 512 branches.
  auto ranges = [](int n) {
    std::string schema = R"({"oneOf":[)";
    for (int i = 0; i < n; ++i) {
      schema += (i ? "," : "") + std::string(R"({"type":"integer","minimum":)") + std::to_string(10 * i) +
                R"(,"maximum":)" + std::to_string(10 * i + 9) + "}";
    }
    return schema + "]}";
  };
  EXPECT_EQ(refusal(ranges(512)), "");
  EXPECT_NE(refusal(ranges(513)).find("only up to 512 branches"), std::string::npos) << refusal(ranges(513));
  // Many such oneOfs in one schema share one budget of proof steps.
  std::string many = R"({"type":"object","properties":{)";
  for (int p = 0; p < 20; ++p) many += (p ? ",\"p" : "\"p") + std::to_string(p) + "\":" + ranges(500);
  EXPECT_NE(refusal(many + "}}").find("steps"), std::string::npos) << refusal(many + "}}");
}

}  // namespace tachyon::structured::one_of_test
