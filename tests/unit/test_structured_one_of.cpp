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

}  // namespace tachyon::structured::one_of_test
