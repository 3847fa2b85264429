// The structured compiler's limits, found by fuzzing the server: what a request may make it
// build (code points, grammar elements, cached bytes) and the inputs whose compile time grew
// faster than their size (chains of nullable rules, many character classes, large enums under
// oneOf). Each limit is a StructuredError (a 400) that names it, never a crash or a 500.
// ctest -R structured_limits
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"

namespace tachyon::structured::limits_test {

ConstraintSpec ebnf(const std::string& text) { return {ConstraintSpec::Kind::kGrammar, text, {}, "guided_grammar"}; }
ConstraintSpec regex(const std::string& text) { return {ConstraintSpec::Kind::kRegex, text, {}, "guided_regex"}; }
ConstraintSpec json(const std::string& text) { return {ConstraintSpec::Kind::kJsonSchema, text, {}, "guided_json"}; }

// "" when the spec compiles, else the StructuredError's message.
std::string refusal(const ConstraintSpec& spec) {
  try {
    build_grammar(spec);
    return "";
  } catch (const StructuredError& e) {
    return e.what();
  }
}

std::shared_ptr<const TokenVocabulary> vocabulary() {
  const std::vector<std::string> tokens = {"", "a", "b", "x", "\"", "{", "}", ":", " "};
  return std::make_shared<const TokenVocabulary>(tokens, 16);
}

bool matches(const ConstraintSpec& spec, const std::string& text) {
  Matcher m(std::make_shared<const CompiledGrammar>(build_grammar(spec), vocabulary(), "test"));
  return m.accept_bytes(text) && m.can_end();
}

// No byte set holds a byte that never occurs in UTF-8 (0xF5-0xFF; 0xFF is no token's byte).
bool utf8_bytes_only(const Grammar& g) {
  for (const ByteSet& set : g.byte_sets()) {
    for (int b = 0xF5; b <= 0xFF; ++b) {
      if (set.test(static_cast<uint8_t>(b))) return false;
    }
  }
  return true;
}

TEST(StructuredLimits, EbnfCodePointsBeyondUnicodeAreRefused) {
  EXPECT_NE(refusal(ebnf(R"(root ::= "\U003C0000")")).find("code point U+3C0000 is beyond U+10FFFF"), std::string::npos)
      << refusal(ebnf(R"(root ::= "\U003C0000")"));
  for (const char* text : {R"(root ::= "\UFFFFFFFF")", R"(root ::= [\U00110000])", R"(root ::= [a-\U00110000])",
                           R"(root ::= [^\UFFFFFFFF])"}) {
    EXPECT_NE(refusal(ebnf(text)).find("is beyond U+10FFFF"), std::string::npos) << text << ": " << refusal(ebnf(text));
  }
  // Surrogates have no UTF-8 form: a literal one is refused (a class drops them).
  EXPECT_NE(refusal(ebnf(R"(root ::= "\uD800")")).find("U+D800"), std::string::npos);
  EXPECT_TRUE(utf8_bytes_only(build_grammar(ebnf(R"(root ::= "\U0010FFFF" [\U00010000-\U0010FFFF] [^a])"))));
  EXPECT_TRUE(matches(ebnf(R"(root ::= "\U00000061" [\x62])"), "ab"));
}

TEST(StructuredLimits, RegexEscapesStayInUnicode) {
  // \x takes two hex digits and \u four, so no regex escape can leave Unicode.
  for (const char* text : {R"(\xff\uFFFF)", R"([\x00-\uFFFF])", R"([^\u0000])", R"(.\W)"}) {
    EXPECT_EQ(refusal(regex(text)), "") << text;
    EXPECT_TRUE(utf8_bytes_only(build_grammar(regex(text)))) << text;
  }
  EXPECT_NE(refusal(regex(R"(\u12)")), "");
}

TEST(StructuredLimits, RepeatsThatMultiplyAreRefusedByTheElementBudget) {
  const std::string limit = std::to_string(Grammar::kMaxElements);
  // Pieces whose copies are 0.4 and 0.3 of the budget (each charged twice: when inlined and when
  // added): each fits alone, three or two do not.
  const std::string k = std::to_string(Grammar::kMaxElements * 2 / 5 / 4096);
  const std::string items = std::to_string(Grammar::kMaxElements * 3 / 10 / 2048);
  const std::string big = R"({"type":"array","minItems":)" + items + R"(,"items":{"type":"string","minLength":2048}})";
  for (const ConstraintSpec& spec :
       {regex("a{4096}{4096}"), regex("a{4096}{" + k + "}b{4096}{" + k + "}c{4096}{" + k + "}"),
        regex("(a{4096}{" + k + "}|b{4096}{" + k + "}|c{4096}{" + k + "})"), ebnf(R"(root ::= "a"{4096}{4096})"),
        ebnf("root ::= \"a\"{4096}{" + k + "} \"b\"{4096}{" + k + "} \"c\"{4096}{" + k + "}"),
        json(R"({"type":"array","minItems":4096,"items":{"type":"string","minLength":4096}})"),
        json(R"({"type":"object","properties":{"a":)" + big + R"(,"b":)" + big + "}}")}) {
    const std::string error = refusal(spec);
    EXPECT_NE(error.find(limit + " grammar elements"), std::string::npos) << spec.text.substr(0, 200) << ": " << error;
  }
  EXPECT_EQ(refusal(regex("a{4096}{" + k + "}")), "");
  EXPECT_EQ(refusal(json(big)), "");
}

TEST(StructuredLimits, ElementBudgetIsCheckedBeforeTheCopiesAreMade) {
  // 4096^3 copies of "a" would need ~550 GB; the refusal comes before any of it is allocated.
  EXPECT_NE(refusal(regex("a{4096}{4096}{4096}")).find("grammar elements"), std::string::npos);
  EXPECT_NE(refusal(ebnf(R"(root ::= "a"{4096}{4096}{4096}{4096})")).find("grammar elements"), std::string::npos);
}

TEST(StructuredLimits, LargeButLinearConstraintsFitTheBudget) {
  EXPECT_EQ(refusal(regex("a{4096}b{0,4096}[a-z]{4096}")), "");
  EXPECT_EQ(refusal(json(R"({"type":"array","maxItems":4096,"items":{"type":"string","maxLength":4096}})")), "");
  EXPECT_EQ(refusal(json(R"({"type":"array","minItems":256,"items":{"type":"string","minLength":256}})")), "");
  const Grammar g = build_grammar(regex("a{100}{100}"));
  EXPECT_GE(g.elements().size(), 10000u);
  EXPECT_LE(g.elements().size(), static_cast<size_t>(Grammar::kMaxElements));
}

TEST(StructuredLimits, CompilerCacheIsBoundedByBytes) {
  const size_t one = build_grammar(regex("a{4096}")).memory_bytes();
  ASSERT_GT(one, 4096u * sizeof(Element));
  GrammarCompiler compiler(vocabulary(), 8 * one);
  for (int i = 0; i < 20; ++i) compiler.compile(regex("a{4096}" + std::string(static_cast<size_t>(i), 'b')));
  EXPECT_LE(compiler.cached_bytes(), 8 * one + 2 * one);
  EXPECT_LT(compiler.cached_grammars(), 20u);
  EXPECT_GE(compiler.cached_grammars(), 1u);
  // A grammar larger than the whole budget is still compiled (and is all the cache keeps).
  GrammarCompiler small(vocabulary(), 1);
  EXPECT_NE(small.compile(regex("a{4096}")), nullptr);
  EXPECT_LE(small.cached_grammars(), 1u);
}

TEST(StructuredLimits, LongChainOfNullableRulesCompiles) {
  // root ::= r1, r1 ::= r2, ..., rN ::= "" | "x": nullability found in one pass, not N passes.
  const int n = 200000;
  std::string text = "root ::= r1\n";
  for (int i = 1; i < n; ++i) text += "r" + std::to_string(i) + " ::= r" + std::to_string(i + 1) + "\n";
  text += "r" + std::to_string(n) + " ::= \"\" | \"x\"\n";
  // (Compiles: matching it is refused by the matcher's expansion depth, a 400 of its own.)
  EXPECT_EQ(refusal(ebnf(text)), "");
  EXPECT_TRUE(matches(ebnf("root ::= r1\nr1 ::= r2\nr2 ::= \"\" | \"x\"\n"), ""));
  // Still found: left recursion at the end of a long nullable chain.
  EXPECT_NE(refusal(ebnf(text + "s ::= r1 s \"a\" | \"b\"\n")).find("left-recursive"), std::string::npos);
}

TEST(StructuredLimits, ManyDistinctClassesAreInternedOnce) {
  std::string text = "root ::= \"\"";
  int classes = 0;
  for (char a = '0'; a <= 'z'; ++a) {
    for (char b = static_cast<char>(a + 1); b <= 'z'; ++b) {
      for (char c = static_cast<char>(b + 1); c <= 'z'; ++c) {
        if (a == '\\' || b == '\\' || c == '\\' || a == ']' || b == ']' || c == ']' || a == '^') continue;
        text += std::string(" [") + a + b + c + "]?";
        ++classes;
      }
    }
  }
  ASSERT_GT(classes, 60000);
  const Grammar g = build_grammar(ebnf(text));
  EXPECT_EQ(g.byte_sets().size(), static_cast<size_t>(classes));
}

// `branches` branches of {"p": one of n distinct integers}, disjoint when `overlap` is false.
std::string enum_branches(int branches, int n, bool overlap) {
  std::string schema = R"({"oneOf":[)";
  for (int b = 0; b < branches; ++b) {
    schema += std::string(b ? "," : "") + R"({"type":"object","properties":{"p":{"enum":[)";
    for (int i = 0; i < n; ++i) schema += std::string(i ? "," : "") + std::to_string(b * n + i - (overlap && b > 0));
    schema += R"(]}},"required":["p"]})";
  }
  return schema + "]}";
}

TEST(StructuredLimits, OneOfOfLargeEnumsIsProvenByHashing) {
  // Disjoint enums are proven exclusive however many values they hold (the pairwise comparison
  // used to stop at its step bound and refuse; 10 x 5000 values took 15 s).
  EXPECT_EQ(refusal(json(enum_branches(2, 30000, false))), "");
  EXPECT_EQ(refusal(json(enum_branches(10, 5000, false))), "");
  EXPECT_TRUE(matches(json(enum_branches(3, 100, false)), R"({"p": 250})"));
  // One shared value (the last of a branch is the first of the next): refused, naming the pair.
  EXPECT_NE(refusal(json(enum_branches(2, 30000, true))).find("branches 0 and 1"), std::string::npos);
  // Equal by value across spellings, and strings against numbers.
  EXPECT_NE(refusal(json(R"({"oneOf":[{"enum":[3,2,1]},{"enum":[1.0,"x"]}]})")), "");
  EXPECT_NE(refusal(json(R"({"oneOf":[{"enum":[0]},{"enum":[-0.0]}]})")), "");
  EXPECT_EQ(refusal(json(R"({"oneOf":[{"enum":["1",[1],{"a":1}]},{"enum":[1,[2],{"a":2}]}]})")), "");
  EXPECT_NE(refusal(json(R"({"oneOf":[{"enum":[{"a":1,"b":2}]},{"enum":[{"b":2,"a":1}]}]})")), "");
}

TEST(StructuredLimits, NonBooleanNullableIsASchemaError) {
  for (const char* schema : {R"({"type":"string","nullable":"yes"})", R"({"type":["string"],"nullable":1})",
                             R"({"oneOf":[{"type":"string","nullable":"yes"},{"type":"integer"}]})",
                             R"({"oneOf":[{"type":"integer"},{"type":"string","nullable":null}]})"}) {
    EXPECT_NE(refusal(json(schema)).find("'nullable' must be true or false"), std::string::npos)
        << schema << ": " << refusal(json(schema));
  }
  EXPECT_EQ(refusal(json(R"({"type":"string","nullable":true})")), "");
}

TEST(StructuredLimits, RefArrayIndicesFollowJsonPointer) {
  const std::string defs = R"({"$defs":{"a":[{"type":"string"},{"type":"integer"}]},"$ref":)";
  for (const char* ref : {"#/$defs/a/99999999999999999999999", "#/$defs/a/00", "#/$defs/a/01", "#/$defs/a/2",
                          "#/$defs/a/-1", "#/$defs/a/1x"}) {
    const std::string error = refusal(json(defs + "\"" + ref + "\"}"));
    EXPECT_NE(error.find(std::string("'") + ref + "' points to nothing"), std::string::npos) << ref << ": " << error;
  }
  EXPECT_TRUE(matches(json(defs + R"("#/$defs/a/1"})"), "12"));
  EXPECT_TRUE(matches(json(defs + R"("#/$defs/a/0"})"), R"("x")"));
}

}  // namespace tachyon::structured::limits_test
