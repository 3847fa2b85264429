// Forced tool calls (structured/tool_call_grammar.h): per format, the grammar accepts the
// family's canonical call (and the server's tool parser reads it back as that call, arguments
// equal), refuses free text, a call of another tool and arguments that break the schema;
// parallel calls only when asked. Then the reasoning prefix (structured/reasoning_prefix.h) and
// the route's choice of constraint (server/chat_constraint.h). ctest -R tool_call_grammar
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "chat_output_harness.h"
#include "structured_byte_grammar.h"
#include "tachyon/server/chat_constraint.h"
#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"
#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::server::tool_call_grammar_test {

using Json = nlohmann::ordered_json;
using structured::ConstraintSpec;

const Json kWeather = Json::parse(
    R"({"name": "get_weather", "index": 0, "parameters": {"type": "object", "properties": {"city": {"type": "string"},
        "days": {"type": "integer"}}, "required": ["city"]}})");
const Json kTime = Json::parse(R"({"name": "get_time", "index": 1})");

std::shared_ptr<const structured::CompiledGrammar> compile(const ConstraintSpec& spec) {
  return structured::testing::compile_over_bytes(spec);
}

ConstraintSpec forced(const std::string& format, Json tools, bool parallel) {
  const Json request = {{"format", format}, {"tools", std::move(tools)}, {"parallel", parallel}};
  return {ConstraintSpec::Kind::kToolCalls, request.dump(), {}, "tool_choice"};
}

bool matches(const std::shared_ptr<const structured::CompiledGrammar>& g, const std::string& text) {
  structured::Matcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

struct FormatCase {
  std::string format;
  std::string one_call;        // get_weather(city "Paris", days 3)
  std::string two_calls;       // the same, then get_time()
  std::string wrong_argument;  // city as a number
};

const std::vector<FormatCase>& format_cases() {
  static const std::vector<FormatCase> cases = {
      {"hermes", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n"
       "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}\n</tool_call>"},
      {"llama3_json", "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"days\": 3}}; {\"name\": \"get_time\", \"parameters\": {}}",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": 3}}"},
      {"mistral", "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}]",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}, "
       "{\"name\": \"get_time\", \"arguments\": {}}]",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": 3}}]"},
      {"deepseek_v3",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"days\": 3}\n"
       "```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"days\": 3}\n"
       "```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜>"
       "<｜tool▁calls▁end｜>",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": 3}\n"
       "```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {"glm45",
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
       "<arg_value>3</arg_value>\n</tool_call>",
       "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value><arg_key>days</arg_key>"
       "<arg_value>3</arg_value></tool_call>\n<tool_call>get_time</tool_call>",
       "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n"
       "<arg_value>three</arg_value>\n</tool_call>"},
      {"qwen3_coder",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
       "</parameter>\n</function>\n</tool_call>",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
       "</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>",
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\nthree\n"
       "</parameter>\n</function>\n</tool_call>"},
      {"deepseek_v32",
       "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
       "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
       "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
       "</｜DSML｜function_calls>",
       "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
       "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
       "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
       "<｜DSML｜invoke name=\"get_time\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
       "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
       "<｜DSML｜parameter name=\"city\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"},
  };
  return cases;
}

TEST(ToolCallGrammar, EachFormatAcceptsItsCanonicalCallAndTheParserReadsItBack) {
  const Json tools_for_parser = Json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
          "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
          {"type": "function", "function": {"name": "get_time"}}])");
  for (const FormatCase& c : format_cases()) {
    SCOPED_TRACE(c.format);
    const auto required = compile(forced(c.format, Json::array({kWeather, kTime}), /*parallel=*/false));
    EXPECT_TRUE(matches(required, c.one_call));
    EXPECT_FALSE(matches(required, c.two_calls)) << "parallel calls were not allowed";
    EXPECT_FALSE(matches(required, c.wrong_argument)) << "arguments must match the schema";
    EXPECT_FALSE(matches(required, "The weather in Paris is sunny.")) << "free text";
    EXPECT_FALSE(matches(required, "Sure. " + c.one_call)) << "text before the call";
    EXPECT_FALSE(matches(required, c.one_call.substr(0, c.one_call.size() - 2))) << "a call cut short";
    const auto parallel = compile(forced(c.format, Json::array({kWeather, kTime}), /*parallel=*/true));
    EXPECT_TRUE(matches(parallel, c.one_call));
    EXPECT_TRUE(matches(parallel, c.two_calls));
    const auto named = compile(forced(c.format, Json::array({kTime}), false));
    EXPECT_FALSE(matches(named, c.one_call)) << "only the named function";
    // The format's own parser reads the canonical text back as the calls.
    const testing::Answer expected{"", "", {{"get_weather", R"({"city": "Paris", "days": 3})"}, {"get_time", "{}"}}};
    EXPECT_EQ(testing::run_chunks(testing::tools_config(c.format, tools_for_parser), {c.two_calls}).calls, expected.calls);
  }
}

// Qwen3-Coder's string parameters are raw text: anything (code with '<', newlines, a '</param'
// that closes nothing) but their closing tag, which the first occurrence of ends the value.
TEST(ToolCallGrammar, Qwen3CoderStringValuesAreAnyTextButTheirClosingTag) {
  const auto g = compile(forced("qwen3_coder", Json::array({kWeather}), false));
  auto call = [](const std::string& city) {
    return "<tool_call>\n<function=get_weather>\n<parameter=city>\n" + city + "\n</parameter>\n</function>\n</tool_call>";
  };
  for (const std::string city : {"", "a < b", "x\n\ny", "</param", "<</parameter", "</parameter", "Zürich"}) {
    EXPECT_TRUE(matches(g, call(city))) << city;
  }
  EXPECT_FALSE(matches(g, call("a</parameter>b"))) << "the closing tag inside the value";
  // The optional parameter may be left out; an unknown one may not.
  EXPECT_FALSE(matches(g, "<tool_call>\n<function=get_weather>\n<parameter=zip>\n1\n</parameter>\n</function>\n</tool_call>"));
  // Without properties, any parameter names with raw values.
  const auto open = compile(forced("qwen3_coder", Json::array({kTime}), false));
  EXPECT_TRUE(matches(open, "<tool_call>\n<function=get_time>\n<parameter=tz>\nUTC <+0>\n</parameter>\n</function>\n</tool_call>"));
  EXPECT_FALSE(matches(open, "<tool_call>\n<function=get_time>\n<parameter=t>z>\nx\n</parameter>\n</function>\n</tool_call>"));
  // minLength / maxLength count characters of the raw text.
  const Json bounded = Json::parse(
      R"({"name": "f", "parameters": {"properties": {"s": {"type": "string", "minLength": 2, "maxLength": 4}}, "required": ["s"]}})");
  const auto b = compile(forced("qwen3_coder", Json::array({bounded}), false));
  auto with = [](const std::string& s) {
    return "<tool_call>\n<function=f>\n<parameter=s>\n" + s + "\n</parameter>\n</function>\n</tool_call>";
  };
  for (const std::string ok : {"ab", "abcd", "a<c", "東京", "</pa", "\n\n"}) EXPECT_TRUE(matches(b, with(ok))) << ok;
  for (const std::string no : {"a", "abcde", "東京大阪府", ""}) EXPECT_FALSE(matches(b, with(no))) << no;
  const Json at_least = Json::parse(
      R"({"name": "f", "parameters": {"properties": {"s": {"type": "string", "minLength": 3}}, "required": ["s"]}})");
  const auto l = compile(forced("qwen3_coder", Json::array({at_least}), false));
  EXPECT_FALSE(matches(l, with("ab")));
  EXPECT_TRUE(matches(l, with("abc")));
  EXPECT_TRUE(matches(l, with(std::string(300, 'x') + "</param<")));
  const Json too_long = Json::parse(R"({"name": "f", "parameters": {"properties": {"s": {"type": "string", "maxLength": 5000}}}})");
  EXPECT_THROW(structured::build_grammar(forced("qwen3_coder", Json::array({too_long}), false)), structured::StructuredError);
}

TEST(ToolCallGrammar, RefusesWhatItCannotForce) {
  EXPECT_THROW(structured::build_grammar(forced("pythonic", Json::array({kTime}), false)), structured::StructuredError);
  const Json bad = Json::parse(R"({"name": "f", "index": 3, "parameters": {"type": "object", "properties": {"x": {"type": "strin"}}}})");
  try {
    structured::build_grammar(forced("hermes", Json::array({bad}), false));
    ADD_FAILURE() << "a bad parameters schema compiled";
  } catch (const structured::StructuredError& e) {
    EXPECT_NE(std::string(e.what()).find("tools[3].function.parameters"), std::string::npos) << e.what();
  }
  const Json patterned = Json::parse(R"({"name": "f", "parameters": {"properties": {"x": {"type": "string", "pattern": "a+"}}}})");
  EXPECT_THROW(structured::build_grammar(forced("glm45", Json::array({patterned}), false)), structured::StructuredError);
  EXPECT_THROW(structured::build_grammar(forced("qwen3_coder", Json::array({patterned}), false)), structured::StructuredError);
}

TEST(ReasoningPrefix, TheConstraintAppliesAfterTheEndMarker) {
  ConstraintSpec spec{ConstraintSpec::Kind::kJsonSchema, R"({"type": "integer"})", {}, "response_format"};
  spec.after_reasoning = structured::ReasoningPrefix{"<think>", "</think>", false};
  const auto g = compile(spec);
  EXPECT_TRUE(matches(g, "42"));                                        // no reasoning at all
  EXPECT_TRUE(matches(g, "<think>\nLet me see: </thin </think</think>\n\n42"));
  EXPECT_TRUE(matches(g, "<think></think>7"));
  EXPECT_FALSE(matches(g, "<think>\nnever closed 42"));
  EXPECT_FALSE(matches(g, "<think>x</think>\n\nforty-two"));               // the answer is constrained
  EXPECT_FALSE(matches(g, "I think 42"));                                 // text outside a reasoning block
  EXPECT_FALSE(matches(g, "<think>x</think>      42")) << "at most 4 whitespace bytes after the reasoning";
  spec.after_reasoning->starts_inside = true;  // the prompt opened <think>
  const auto inside = compile(spec);
  EXPECT_TRUE(matches(inside, "some thoughts </think>\n42"));
  EXPECT_FALSE(matches(inside, "42"));
  EXPECT_FALSE(matches(inside, "<think>x"));
}

ChatRequest chat(const std::string& fields) {
  ServerLimits limits;
  limits.grammar_compiler = std::make_shared<structured::GrammarCompiler>(structured::testing::byte_vocabulary());
  return parse_chat_request(R"({"messages": [{"role": "user", "content": "hi"}], )" + fields + "}", limits);
}

TEST(ChatConstraint, ForcedCallsAndReasoning) {
  const std::string tools =
      R"("tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
                   {"type": "function", "function": {"name": "b"}}])";
  const ChatParsers hermes{"hermes", "", false, false};
  EXPECT_FALSE(chat_constraint(chat(tools), hermes, "").has_value()) << "auto forces nothing";
  auto required = chat_constraint(chat(tools + R"(, "tool_choice": "required")"), hermes, "");
  ASSERT_TRUE(required.has_value());
  EXPECT_EQ(required->kind, ConstraintSpec::Kind::kToolCalls);
  const Json request = Json::parse(required->text);
  EXPECT_EQ(request["tools"].size(), 2u);
  EXPECT_TRUE(request["parallel"].get<bool>());
  EXPECT_FALSE(Json::parse(chat_constraint(chat(tools + R"(, "tool_choice": "required", "parallel_tool_calls": false)"),
                                           hermes, "")->text)["parallel"].get<bool>());
  const Json named = Json::parse(
      chat_constraint(chat(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "b"}})"), hermes, "")->text);
  ASSERT_EQ(named["tools"].size(), 1u);
  EXPECT_EQ(named["tools"][0]["name"], "b");
  EXPECT_EQ(named["tools"][0]["index"], 1);
  EXPECT_FALSE(named["parallel"].get<bool>());
  try {
    chat_constraint(chat(tools + R"(, "tool_choice": "required")"), ChatParsers{}, "");
    ADD_FAILURE() << "forced a call without a format";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().param, "tool_choice");
  }
  // A reasoning model: the constraint moves after the reasoning, inside when the prompt opened it.
  const ChatParsers qwen3{"hermes", "qwen3", false, false};
  auto after = chat_constraint(chat(R"("guided_regex": "[0-9]+")"), qwen3, "<|im_start|>assistant\n");
  ASSERT_TRUE(after.has_value() && after->after_reasoning.has_value());
  EXPECT_EQ(after->after_reasoning->end, "</think>");
  EXPECT_FALSE(after->after_reasoning->starts_inside);
  EXPECT_TRUE(chat_constraint(chat(R"("guided_regex": "[0-9]+")"), qwen3, "<think>\n")->after_reasoning->starts_inside);
  EXPECT_FALSE(chat_constraint(chat(R"("guided_regex": "[0-9]+")"), hermes, "")->after_reasoning.has_value());
  EXPECT_FALSE(chat_constraint(chat(R"("guided_regex": "[0-9]+")"), qwen3, "assistant\n<think>\n\n</think>\n\n")
                   ->after_reasoning.has_value())
      << "enable_thinking false closed the block in the prompt";
}

// Qwen3's real chat template: thinking on leaves the answer free to reason first, so the
// constraint moves after </think>; enable_thinking false renders a closed block and the
// constraint holds from the first token. A forced call moves the same way.
TEST(ChatConstraint, Qwen3TemplateDecidesWhereTheConstraintStarts) {
  auto tok = tokenizer::Tokenizer::from_dir(std::filesystem::path(TACHYON_TOKENIZERS) / "qwen3");
  const ChatParsers parsers = resolve_chat_parsers("auto", "auto", tok);
  ASSERT_EQ(parsers.reasoning, "qwen3");
  const tokenizer::ChatTemplate chat_template(tok.chat_template(), "", "<|im_end|>");
  auto rendered = [&](bool thinking) {
    tokenizer::ChatTemplateInputs inputs;
    inputs.messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
    inputs.add_generation_prompt = true;
    inputs.extra = {{"enable_thinking", thinking}};
    return chat_template.render(inputs);
  };
  const ChatRequest request = chat(R"("response_format": {"type": "json_object"})");
  const auto thinking = chat_constraint(request, parsers, rendered(true));
  ASSERT_TRUE(thinking->after_reasoning.has_value());
  EXPECT_FALSE(thinking->after_reasoning->starts_inside);
  EXPECT_FALSE(chat_constraint(request, parsers, rendered(false))->after_reasoning.has_value());
  const auto forced = chat_constraint(
      chat(R"("tools": [{"type": "function", "function": {"name": "a"}}], "tool_choice": "required")"), parsers, rendered(true));
  EXPECT_EQ(forced->kind, ConstraintSpec::Kind::kToolCalls);
  EXPECT_TRUE(forced->after_reasoning.has_value());
  // Compiled over the real vocabulary, "<think>" (an added token) may open the answer; the
  // markers are asked for as their tokens (test_reasoning_marker_ids.cpp).
  structured::GrammarCompiler compiler(structured::TokenVocabulary::from_tokenizer(tok, 0));
  structured::Matcher matcher(compiler.compile(*thinking));
  EXPECT_TRUE(matcher.next_mask()->allows(*tok.token_to_id("<think>")));
  EXPECT_TRUE(matcher.accept_token(*tok.token_to_id("<think>")));
  EXPECT_TRUE(matcher.accept_bytes("\nhmm"));
  EXPECT_TRUE(matcher.accept_token(*tok.token_to_id("</think>")));
  EXPECT_TRUE(matcher.accept_bytes("\n\n{}"));
  EXPECT_TRUE(matcher.can_end());
}

}  // namespace tachyon::server::tool_call_grammar_test
