// The grammar engine (src/tachyon/structured/): JSON schema, regex, choice and EBNF constraints
// accept valid strings and refuse invalid ones byte by byte; masks over a small vocabulary equal
// the tokens a brute-force check accepts; unsupported keywords are refused by name.
// ctest -R structured
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"

namespace tachyon::structured::grammar_test {

std::shared_ptr<const TokenVocabulary> tiny_vocabulary() {
  std::vector<std::string> tokens = {"",  "{", "}", "\"", "a", "b", ":", " ", ",", "1", "12", "-", ".", "e",
                                     "[", "]", "true", "false", "null", "\"a", "\":", "\": ", ", \"", "x", "é",
                                     "\xC3", "\xA9", "\\", "n", "u", "0", "ab", "}]", "\n"};
  return std::make_shared<const TokenVocabulary>(tokens, 40);
}

std::shared_ptr<const CompiledGrammar> compile(ConstraintSpec spec) {
  return std::make_shared<const CompiledGrammar>(build_grammar(spec), tiny_vocabulary(), "test");
}
ConstraintSpec schema(const std::string& text) { return {ConstraintSpec::Kind::kJsonSchema, text, {}, "json_schema"}; }
ConstraintSpec regex(const std::string& text) { return {ConstraintSpec::Kind::kRegex, text, {}, "guided_regex"}; }

// Whole string accepted and complete.
bool matches(const std::shared_ptr<const CompiledGrammar>& g, const std::string& text) {
  Matcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

TEST(StructuredGrammar, JsonSchemaObject) {
  auto g = compile(schema(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
                               "tags":{"type":"array","items":{"type":"string"},"maxItems":2}},
                               "required":["name"]})"));
  EXPECT_TRUE(matches(g, R"({"name": "bob"})"));
  EXPECT_TRUE(matches(g, R"({"name": "b\"o\u00e9b", "age": -12})"));
  EXPECT_TRUE(matches(g, R"({"name": "é", "tags": ["x", "y"]})"));
  EXPECT_TRUE(matches(g, R"({"name": "", "age": 0, "tags": []})"));
  EXPECT_FALSE(matches(g, R"({"age": 1})"));                    // name required
  EXPECT_FALSE(matches(g, R"({"age": 1, "name": "x"})"));       // schema order
  EXPECT_FALSE(matches(g, R"({"name": "x", "other": 1})"));     // no additional properties
  EXPECT_FALSE(matches(g, R"({"name": "x", "age": 01})"));      // no leading zero
  EXPECT_FALSE(matches(g, R"({"name": "x", "tags": ["a", "b", "c"]})"));  // maxItems
  EXPECT_FALSE(matches(g, "{\"name\": \"a\nb\"}"));             // control character unescaped
  EXPECT_FALSE(matches(g, "{\"name\": \"\xC3\"}"));             // invalid UTF-8
  EXPECT_FALSE(matches(g, R"({"name": "x")"));                  // incomplete
}

TEST(StructuredGrammar, JsonSchemaKeywords) {
  EXPECT_TRUE(matches(compile(schema(R"({"enum":["a",1,null,{"k":[1,2]}]})")), R"({"k":[1,2]})"));
  EXPECT_TRUE(matches(compile(schema(R"({"const":"x"})")), R"("x")"));
  auto any_of = compile(schema(R"({"anyOf":[{"type":"number"},{"type":"boolean"}]})"));
  EXPECT_TRUE(matches(any_of, "-1.5e+3"));
  EXPECT_TRUE(matches(any_of, "false"));
  EXPECT_FALSE(matches(any_of, "\"1\""));
  auto recursive = compile(schema(R"({"$defs":{"node":{"type":"object","properties":{"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["next"]}},"$ref":"#/$defs/node"})"));
  EXPECT_TRUE(matches(recursive, R"({"next": {"next": null}})"));
  EXPECT_FALSE(matches(recursive, R"({"next": {}})"));
  auto bounded = compile(schema(R"({"type":"string","minLength":2,"maxLength":3})"));
  EXPECT_FALSE(matches(bounded, R"("a")"));
  EXPECT_TRUE(matches(bounded, R"("ab")"));
  EXPECT_TRUE(matches(bounded, R"("abé")"));
  EXPECT_FALSE(matches(bounded, R"("abcd")"));
  auto pattern = compile(schema(R"({"type":"string","pattern":"^[a-c]+x$"})"));
  EXPECT_TRUE(matches(pattern, R"("abcx")"));
  EXPECT_FALSE(matches(pattern, R"("x")"));
  auto date = compile(schema(R"({"type":"string","format":"date"})"));
  EXPECT_TRUE(matches(date, R"("2024-02-29")"));
  EXPECT_FALSE(matches(date, R"("2024-13-01")"));
  // Days of the calendar only: what validators check (found by the schema corpus test).
  EXPECT_TRUE(matches(date, R"("2000-02-29")"));
  EXPECT_TRUE(matches(date, R"("1999-12-31")"));
  EXPECT_FALSE(matches(date, R"("2023-02-29")"));
  EXPECT_FALSE(matches(date, R"("1900-02-29")"));
  EXPECT_FALSE(matches(date, R"("2024-04-31")"));
  EXPECT_FALSE(matches(date, R"("0000-01-01")"));
  auto time = compile(schema(R"({"type":"string","format":"time"})"));
  EXPECT_TRUE(matches(time, R"("23:59:59.5Z")"));
  EXPECT_FALSE(matches(time, R"("23:59:60Z")"));
  auto items = compile(schema(R"({"type":"array","items":{"type":"integer"},"minItems":1})"));
  EXPECT_FALSE(matches(items, "[]"));
  EXPECT_TRUE(matches(items, "[1, 2, 3]"));
  EXPECT_TRUE(matches(compile({ConstraintSpec::Kind::kJsonObject, "", {}, "response_format"}), R"({"a": [1, {"b": null}], "c": "d"})"));
}

// Tuples (prefixItems, every one written; draft 4's items array), maps (additionalProperties without properties,
// minProperties <= 1, maxProperties), and the ipv4 / ipv6 / email formats: exactly what the schema
// allows, in the one-line JSON form.
TEST(StructuredGrammar, TuplesMapsAndNetworkFormats) {
  const auto closed = compile(schema(R"({"prefixItems":[{"type":"string"},{"type":"integer"}],"items":false,"minItems":1})"));
  EXPECT_TRUE(matches(closed, R"(["a", 1])"));
  EXPECT_FALSE(matches(closed, R"(["a"])"));          // every prefix item is written (as xgrammar does)
  EXPECT_FALSE(matches(closed, "[]"));
  EXPECT_FALSE(matches(closed, R"(["a", 1, 2])"));    // items: false
  EXPECT_FALSE(matches(closed, "[1]"));               // item 0 is a string
  const auto rest = compile(schema(R"({"type":"array","prefixItems":[{"type":"boolean"}],"items":{"type":"integer"},"maxItems":3})"));
  EXPECT_TRUE(matches(rest, "[true]"));
  EXPECT_TRUE(matches(rest, "[true, 1, 2]"));
  EXPECT_FALSE(matches(rest, R"([true, "x"])"));
  EXPECT_FALSE(matches(rest, "[true, 1, 2, 3]"));     // maxItems
  const auto draft4 = compile(schema(R"({"items":[{"type":"null"}],"additionalItems":{"type":"string"}})"));
  EXPECT_TRUE(matches(draft4, R"([null, "a", "b"])"));
  EXPECT_FALSE(matches(draft4, "[null, 1]"));
  const auto map = compile(schema(R"({"type":"object","additionalProperties":{"type":"integer"},"minProperties":1,"maxProperties":2})"));
  EXPECT_TRUE(matches(map, R"({"a": 1})"));
  EXPECT_TRUE(matches(map, R"({"a": 1, "b": -2})"));
  EXPECT_FALSE(matches(map, "{}"));                    // minProperties
  EXPECT_FALSE(matches(map, R"({"a": 1, "b": 2, "c": 3})"));  // maxProperties
  EXPECT_FALSE(matches(map, R"({"a": "x"})"));         // values are integers
  const auto listed = compile(schema(R"({"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"integer"}})"));
  EXPECT_TRUE(matches(listed, R"({"a": "x"})"));
  EXPECT_FALSE(matches(listed, R"({"a": "x", "b": 1})"));  // beside properties, only they are written
  EXPECT_TRUE(matches(compile(schema(R"({"type":"object","additionalProperties":false})")), "{}"));
  // Beside properties (written once each, so they count exactly): a required, b and c optional.
  const auto counted = compile(schema(R"({"properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["a"],"minProperties":2,"maxProperties":2})"));
  EXPECT_TRUE(matches(counted, R"({"a": 1, "b": 2})"));
  EXPECT_TRUE(matches(counted, R"({"a": 1, "c": 3})"));
  EXPECT_FALSE(matches(counted, R"({"a": 1})"));
  EXPECT_FALSE(matches(counted, R"({"a": 1, "b": 2, "c": 3})"));
  EXPECT_FALSE(matches(counted, R"({"b": 2, "c": 3})"));  // a is required
  const auto at_most = compile(schema(R"({"properties":{"x":{"type":"null"},"y":{"type":"null"}},"maxProperties":1})"));
  for (const char* ok : {"{}", R"({"x": null})", R"({"y": null})"}) EXPECT_TRUE(matches(at_most, ok)) << ok;
  EXPECT_FALSE(matches(at_most, R"({"x": null, "y": null})"));
  const auto named = compile(schema(R"({"type":"object","propertyNames":{"pattern":"^[a-z]{1,3}$"},"additionalProperties":{"type":"integer"}})"));
  EXPECT_TRUE(matches(named, R"({"ab": 1, "x": 2})"));
  EXPECT_FALSE(matches(named, R"({"AB": 1})"));
  EXPECT_FALSE(matches(named, R"({"abcd": 1})"));
  EXPECT_TRUE(matches(compile(schema(R"({"propertyNames":{"enum":["a","b"]}})")), R"({"b": [1], "a": null})"));
  const auto patterned = compile(schema(R"({"patternProperties":{"^id_[0-9]+$":{"type":"boolean"}},"additionalProperties":false})"));
  EXPECT_TRUE(matches(patterned, R"({"id_1": true, "id_22": false})"));
  EXPECT_TRUE(matches(patterned, "{}"));
  EXPECT_FALSE(matches(patterned, R"({"id_x": true})"));
  EXPECT_FALSE(matches(patterned, R"({"id_1": 1})"));
  const auto ipv4 = compile(schema(R"({"type":"string","format":"ipv4"})"));
  for (const char* ok : {R"("1.2.3.4")", R"("255.255.255.255")", R"("0.0.0.0")"}) EXPECT_TRUE(matches(ipv4, ok)) << ok;
  for (const char* bad : {R"("256.1.1.1")", R"("01.1.1.1")", R"("1.2.3")"}) EXPECT_FALSE(matches(ipv4, bad)) << bad;
  const auto ipv6 = compile(schema(R"({"type":"string","format":"ipv6"})"));
  for (const char* ok : {R"("::")", R"("::1")", R"("fe80::1:2")", R"("1:2:3:4:5:6:7:8")", R"("1::")"}) {
    EXPECT_TRUE(matches(ipv6, ok)) << ok;
  }
  for (const char* bad : {R"("1::2::3")", R"(":::")", R"("1:2:3:4:5:6:7:8:9")", R"("12345::")"}) {
    EXPECT_FALSE(matches(ipv6, bad)) << bad;
  }
  const auto email = compile(schema(R"({"type":"string","format":"email"})"));
  EXPECT_TRUE(matches(email, R"("first.last+tag@mail.example.org")"));
  for (const char* bad : {R"("a@b")", R"("a..b@c.de")", R"("@c.de")", R"("a@-c.de")"}) EXPECT_FALSE(matches(email, bad)) << bad;
  // Pydantic's HttpUrl: a uri of 1 to 2,083 characters (every uri written is at most 1,890).
  const auto uri = compile(schema(R"({"type":"string","format":"uri","minLength":1,"maxLength":2083})"));
  for (const char* good : {R"("https://example.org")", R"("http://127.0.0.1:8080/a/b%20c?x=1&y=a/b?#top")",
                           R"("git+ssh://host.example/repo.git")", R"("https://a.b/~user/(x);p=1,2@:")"}) {
    EXPECT_TRUE(matches(uri, good)) << good;
  }
  for (const char* bad : {R"("example.org")", R"("https://")", R"("https://a b")", R"("https://a/%zz")",
                          R"("1http://a")", R"("https://a:123456")", R"("https://a/"")"}) {
    EXPECT_FALSE(matches(uri, bad)) << bad;
  }
}

TEST(StructuredGrammar, RefusesUnsupportedKeywordsByName) {
  for (const char* text : {R"({"type":"number","minimum":3,"maximum":2})", R"({"type":"number","multipleOf":3})",
                           R"({"minimum":3})", R"({"type":"integer","minimum":3,"maximum":2})",
                           R"({"type":"object","properties":{"a":{"type":"string"}},"minProperties":2})",
                           R"({"type":"array","uniqueItems":true})", R"({"type":"string","format":"hostname"})",
                           R"({"$ref":"http://example.com/s.json"})", R"({"type":"wat"})", "not json"}) {
    EXPECT_THROW(build_grammar(schema(text)), StructuredError) << text;
  }
  try {
    build_grammar(schema(R"({"type":"object","properties":{"n":{"type":"number","maximum":1e300}}})"));
    FAIL();
  } catch (const StructuredError& e) {
    EXPECT_NE(std::string(e.what()).find("2^53"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("properties.n"), std::string::npos) << e.what();
  }
}

// A keyword whose value has the wrong JSON type is the user's schema error (a 400), never a
// JSON library exception escaping as a 500.
TEST(StructuredGrammar, KeywordsOfTheWrongJsonTypeAreStructuredErrors) {
  for (const char* text : {R"({"type":"object","properties":[1,2]})", R"({"type":"object","required":"a"})",
                           R"({"type":"integer","minimum":"3"})", R"({"type":"array","items":"x"})",
                           R"({"type":"string","minLength":"2"})", R"({"enum":"a"})", R"({"type":7})",
                           R"({"anyOf":{"type":"string"}})", R"({"type":"array","maxItems":true})", R"([1])"}) {
    try {
      build_grammar(schema(text));
    } catch (const StructuredError&) {
      continue;
    } catch (const std::exception& e) {
      ADD_FAILURE() << text << ": " << e.what() << " is not a StructuredError";
      continue;
    }
    // Accepting is allowed only where the schema is valid after all; none of these is.
    ADD_FAILURE() << text << " was accepted";
  }
}

TEST(StructuredGrammar, RegexChoiceAndEbnf) {
  auto r = compile(regex(R"(\d{3}-[a-z]+(\.(com|org))?)"));
  EXPECT_TRUE(matches(r, "123-abc"));
  EXPECT_TRUE(matches(r, "123-abc.org"));
  EXPECT_FALSE(matches(r, "12-abc"));
  EXPECT_FALSE(matches(r, "123-abc.net"));
  EXPECT_TRUE(matches(compile(regex("(ab)*c")), "ababc"));
  EXPECT_TRUE(matches(compile(regex("[^a]é.")), "bé\xE2\x82\xAC"));
  EXPECT_THROW(build_grammar(regex("(a*)*")), StructuredError);
  EXPECT_THROW(build_grammar(regex("(?=a)b")), StructuredError);
  EXPECT_THROW(build_grammar(regex("(a)\\1")), StructuredError);
  auto choice = compile({ConstraintSpec::Kind::kChoice, "", {"yes", "no", "maybe"}, "guided_choice"});
  EXPECT_TRUE(matches(choice, "maybe"));
  EXPECT_FALSE(matches(choice, "ma"));
  auto ebnf = compile({ConstraintSpec::Kind::kGrammar, "root ::= item (\",\" item)*  # list\nitem ::= [a-c]+ | \"x\"{2}\n", {}, "guided_grammar"});
  EXPECT_TRUE(matches(ebnf, "ab,xx,c"));
  EXPECT_FALSE(matches(ebnf, "ab,x"));
  EXPECT_THROW(build_grammar({ConstraintSpec::Kind::kGrammar, "root ::= root \"a\" | \"b\"", {}, "guided_grammar"}), StructuredError);
  EXPECT_THROW(build_grammar({ConstraintSpec::Kind::kGrammar, "root ::= other", {}, "guided_grammar"}), StructuredError);
}

// The mask equals a brute-force check of every token against a fresh matcher in the same state.
TEST(StructuredGrammar, MaskEqualsBruteForce) {
  auto g = compile(schema(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"array","items":{"type":"number"}}},"required":["a"]})"));
  const std::vector<std::string> prefixes = {"", "{", "{\"a", "{\"a\": \"", "{\"a\": \"x\\", "{\"a\": \"\xC3", "{\"a\": \"x\"",
                                             "{\"a\": \"x\", \"b\": [1", "{\"a\": \"x\", \"b\": [1.", "{\"a\": \"x\"}"};
  const TokenVocabulary& v = g->vocabulary();
  for (const std::string& prefix : prefixes) {
    Matcher m(g);
    ASSERT_TRUE(m.accept_bytes(prefix)) << prefix;
    const auto mask = m.next_mask();
    ASSERT_EQ(mask->words.size(), 2u);
    EXPECT_EQ(mask->can_end, prefix == "{\"a\": \"x\"}");
    for (int32_t id = 0; id < 40; ++id) {
      Matcher probe(g);
      probe.accept_bytes(prefix);
      const bool expected = id < v.num_tokens() && probe.accept_token(id);
      EXPECT_EQ(mask->allows(id), expected) << "prefix '" << prefix << "' token " << id;
    }
  }
}

TEST(StructuredGrammar, MasksAreCachedByState) {
  auto g = compile(schema(R"({"type":"string"})"));
  Matcher m(g);
  ASSERT_TRUE(m.accept_bytes("\"ab"));
  const auto first = m.next_mask();
  ASSERT_TRUE(m.accept_bytes("abab"));
  EXPECT_EQ(m.next_mask(), first);  // same state inside the string: the same cached mask
  EXPECT_EQ(g->cached_masks(), 1u);
}

// A stack as deep as the output is long (nested arrays): matching and compaction stay iterative.
TEST(StructuredGrammar, DeepNestingMatches) {
  auto g = compile({ConstraintSpec::Kind::kJsonObject, "", {}, "response_format"});
  const int depth = 5000;
  Matcher m(g);
  ASSERT_TRUE(m.accept_bytes("{\"a\": "));
  for (int i = 0; i < depth; ++i) ASSERT_TRUE(m.accept_bytes("["));
  EXPECT_FALSE(m.can_end());
  for (int i = 0; i < depth; ++i) ASSERT_TRUE(m.accept_bytes("]"));
  ASSERT_TRUE(m.accept_bytes("}"));
  EXPECT_TRUE(m.must_end());
}

TEST(StructuredGrammar, CompilerCachesByCanonicalText) {
  GrammarCompiler compiler(tiny_vocabulary());
  auto a = compiler.compile(schema(R"({"type":"integer"})"));
  auto b = compiler.compile(schema(R"({"type":"integer"})"));
  auto c = compiler.compile(schema(R"({"type":"number"})"));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(compiler.cached_grammars(), 2u);
}

}  // namespace tachyon::structured::grammar_test
