// Structured-output request fields (server/openai_structured_fields.cpp): each spelling compiles
// into params.structured on both routes, a bad or unsupported constraint is a 400 on the field
// that carried it, and two constraints in one request are refused. ctest -R structured_fields
#include <gtest/gtest.h>

#include "tachyon/server/chat_constraint.h"
#include "tachyon/server/openai_protocol.h"
#include "tachyon/structured/matcher.h"

namespace tachyon::server::structured_fields_test {

ServerLimits limits_with_compiler() {
  ServerLimits l;
  l.model_name = "tiny";
  l.max_model_len = 100;
  l.vocab_size = 64;
  std::vector<std::string> tokens;
  for (int c = 32; c < 96; ++c) tokens.push_back(std::string(1, static_cast<char>(c)));  // ' ' .. '_'
  l.grammar_compiler = std::make_shared<structured::GrammarCompiler>(
      std::make_shared<const structured::TokenVocabulary>(tokens, 64));
  return l;
}

core::SamplingParams completion(const std::string& fields) {
  return parse_completion_request(R"({"prompt":"hi",)" + fields + "}", limits_with_compiler()).params;
}
// As the chat route does it: the request parsed, then its constraint compiled (no parsers).
core::SamplingParams chat(const std::string& fields, const ServerLimits& limits = limits_with_compiler(),
                          const ChatParsers& parsers = {}) {
  ChatRequest request = parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}],)" + fields + "}", limits);
  EXPECT_EQ(request.params.structured, nullptr) << "the chat request parser compiles nothing";
  apply_chat_constraint(request, parsers, "<|im_start|>assistant\n", limits, request.params);
  return request.params;
}

// The constraint accepts `text` whole.
bool accepts(const core::SamplingParams& p, const std::string& text) {
  if (p.structured == nullptr) return false;
  structured::Matcher m(p.structured);
  return m.accept_bytes(text) && m.can_end();
}

ApiError error_of(const std::string& fields, bool on_chat = false) {
  try {
    if (on_chat) {
      chat(fields);
    } else {
      completion(fields);
    }
  } catch (const ApiException& e) {
    return e.error();
  }
  ADD_FAILURE() << "no error for " << fields;
  return {};
}

TEST(OpenaiStructuredFields, EverySpellingCompiles) {
  const std::string schema = R"({"type":"object","properties":{"A":{"type":"integer"}},"required":["A"]})";
  EXPECT_TRUE(accepts(chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" + schema + R"(,"strict":true}})"), R"({"A": 5})"));
  EXPECT_TRUE(accepts(completion(R"("response_format":{"type":"json_object"})"), R"({"B": [1]})"));
  EXPECT_TRUE(accepts(completion(R"("guided_json":)" + schema), R"({"A": 5})"));
  EXPECT_TRUE(accepts(completion(R"("guided_json":")" + std::string(R"({\"type\":\"integer\"})") + "\""), "42"));
  EXPECT_TRUE(accepts(completion(R"("guided_regex":"[A-C]{2}")"), "AB"));
  EXPECT_TRUE(accepts(completion(R"("guided_choice":["YES","NO"])"), "NO"));
  EXPECT_TRUE(accepts(completion(R"("guided_grammar":"root ::= \"A\" | \"B\"")"), "B"));
  EXPECT_TRUE(accepts(chat(R"("structured_outputs":{"choice":["X","Y"]})"), "Y"));
  EXPECT_TRUE(accepts(chat(R"("structured_outputs":{"json":)" + schema + "}"), R"({"A": 1})"));
  EXPECT_TRUE(accepts(chat(R"("structured_outputs":{"json_object":true})"), "{}"));
  EXPECT_EQ(completion(R"("response_format":{"type":"text"})").structured, nullptr);
  // The same text twice: one compiled grammar (the compiler's cache).
  const ServerLimits l = limits_with_compiler();
  const auto a = parse_completion_request(R"({"prompt":"hi","guided_regex":"A+"})", l).params.structured;
  const auto b = parse_completion_request(R"({"prompt":"hi","guided_regex":"A+"})", l).params.structured;
  EXPECT_EQ(a, b);
}

TEST(OpenaiStructuredFields, BadConstraintsAre400sOnTheirField) {
  struct Case {
    std::string fields, param, fragment;
  };
  const std::vector<Case> cases = {
      {R"("guided_json":{"type":"number","multipleOf":1})", "guided_json", "'multipleOf'"},
      {R"("guided_json":"{not json")", "guided_json", "not valid JSON"},
      {R"("guided_regex":"(a")", "guided_regex", "unterminated"},
      {R"x("guided_regex":"(?=a)")x", "guided_regex", "lookaround"},
      {R"("guided_choice":[])", "guided_choice", "non-empty array"},
      {R"("guided_choice":[1])", "guided_choice", "array of strings"},
      {R"("guided_grammar":"start ::= \"a\"")", "guided_grammar", "'root'"},
      {R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object","properties":{"a":{"type":"string","format":"hostname"}}}}})",
       "response_format.json_schema.schema", "format 'hostname'"},
      {R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"object","properties":{"v":{"oneOf":[{"type":"integer"},{"type":"number"}]}}}}})",
       "response_format.json_schema.schema", "at 'properties.v.oneOf': branches 0 and 1 may both match"},
      {R"("structured_outputs":{"regex":"A","choice":["B"]})", "structured_outputs", "one of"},
      {R"("structured_outputs":{"xml":"A"})", "structured_outputs.xml", "not supported"},
      {R"("guided_regex":"A","guided_choice":["B"])", "guided_choice", "one structured-output constraint"},
      {R"("guided_whitespace_pattern":" *","guided_regex":"A")", "guided_whitespace_pattern", "not supported"},
      {R"("guided_regex":"A","min_tokens":2)", "min_tokens", "structured outputs"},
      {R"("guided_regex":"A","ignore_eos":true)", "ignore_eos", "structured outputs"},
  };
  for (const Case& c : cases) {
    for (bool on_chat : {false, true}) {
      const ApiError e = error_of(c.fields, on_chat);
      EXPECT_EQ(e.status, 400) << c.fields << (on_chat ? " (chat)" : "");
      EXPECT_EQ(e.param, c.param) << c.fields << " -> " << e.message;
      EXPECT_NE(e.message.find(c.fragment), std::string::npos) << c.fields << " -> " << e.message;
    }
  }
}

// A new schema on the chat route of a model that reasons is compiled once, in the form it is
// used (after the reasoning), not once as asked and again with the reasoning prefix; the same
// schema again is not compiled at all.
TEST(OpenaiStructuredFields, ChatConstraintCompilesOnceWithAReasoningParser) {
  const ServerLimits l = limits_with_compiler();
  ChatParsers qwen3;
  qwen3.reasoning = "qwen3";
  const std::string format = R"("response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"integer"}}})";
  const core::SamplingParams first = chat(format, l, qwen3);
  EXPECT_EQ(l.grammar_compiler->cached_grammars(), 1u) << "one compilation of a new schema";
  structured::Matcher m(first.structured);
  EXPECT_TRUE(m.accept_bytes("<think>Hm.</think>\n42") && m.can_end()) << "the one compiled is the one used";
  EXPECT_EQ(chat(format, l, qwen3).structured, first.structured);
  EXPECT_EQ(l.grammar_compiler->cached_grammars(), 1u);
}

}  // namespace tachyon::server::structured_fields_test
