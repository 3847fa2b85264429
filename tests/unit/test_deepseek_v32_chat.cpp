// DeepSeek-V3.2's chat format, which its release ships as a Python encoder instead of a Jinja
// template: the native prompt renderer (tokenizer/deepseek_v32_prompt.h) against prompts written
// out by hand from the release's format (its turn markers, the tools block, DSML calls and
// function results, chat vs thinking mode), the DSML tool parser (server/tool_parser_deepseek_v32.cpp)
// whole and in every chunking, and the round trip: calls rendered into a prompt's assistant turn
// and parsed back are the calls the conversation held.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "chat_output_harness.h"
#include "tachyon/base/check.h"
#include "tachyon/tokenizer/deepseek_v32_prompt.h"

namespace tachyon::server::deepseek_v32_chat_test {
namespace {

using Json = nlohmann::ordered_json;
using testing::Answer;

const std::string kBos =
    "<\xEF\xBD\x9C"
    "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";  // <｜begin▁of▁sentence｜>
const std::string kEos =
    "<\xEF\xBD\x9C"
    "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
const std::string kUser =
    "<\xEF\xBD\x9C"
    "User\xEF\xBD\x9C>";
const std::string kAssistant =
    "<\xEF\xBD\x9C"
    "Assistant\xEF\xBD\x9C>";
const std::string kDsml =
    "\xEF\xBD\x9C"
    "DSML\xEF\xBD\x9C";

std::string render(const Json& messages, const Json& tools = nullptr, bool thinking = false) {
  tokenizer::ChatTemplateInputs inputs;
  inputs.messages = messages;
  inputs.tools = tools;
  inputs.add_generation_prompt = true;
  inputs.extra = {{"enable_thinking", thinking}};
  return tokenizer::ChatTemplate::deepseek_v32(kBos, kEos).render(inputs);
}

TEST(DeepseekV32Prompt, ChatModeClosesTheThinkingAfterEveryUserTurn) {
  const Json messages = Json::array({{{"role", "system"}, {"content", "Be brief."}},
                                     {{"role", "user"}, {"content", "Hi"}},
                                     {{"role", "assistant"}, {"content", "Hello!"}, {"reasoning_content", "greet"}},
                                     {{"role", "user"}, {"content", "Bye"}}});
  EXPECT_EQ(render(messages), kBos + "Be brief." + kUser + "Hi" + kAssistant + "</think>Hello!" + kEos + kUser + "Bye" +
                                  kAssistant + "</think>");
}

TEST(DeepseekV32Prompt, ThinkingModeOpensTheLastUserTurnAndDropsEarlierReasoning) {
  const Json messages = Json::array({{{"role", "user"}, {"content", "Hi"}},
                                     {{"role", "assistant"}, {"content", "Hello!"}, {"reasoning_content", "greet"}},
                                     {{"role", "user"}, {"content", "Bye"}}});
  EXPECT_EQ(render(messages, nullptr, true),
            kBos + kUser + "Hi" + kAssistant + "</think>Hello!" + kEos + kUser + "Bye" + kAssistant + "<think>");
  // thinking (vLLM's name for it) as well as enable_thinking.
  tokenizer::ChatTemplateInputs inputs;
  inputs.messages = Json::array({{{"role", "user"}, {"content", "Hi"}}});
  inputs.extra = {{"thinking", true}};
  EXPECT_EQ(tokenizer::ChatTemplate::deepseek_v32(kBos, kEos).render(inputs),
            kBos + kUser + "Hi" + kAssistant + "<think>");
}

const Json kTools =
    Json::array({{{"type", "function"},
                  {"function",
                   {{"name", "get_weather"},
                    {"description", "Weather"},
                    {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});

TEST(DeepseekV32Prompt, ToolsComeFirstAsTheirOwnSystemBlock) {
  const std::string prompt = render(Json::array({{{"role", "user"}, {"content", "Weather?"}}}), kTools);
  const std::string schema =
      "{\"name\": \"get_weather\", \"description\": \"Weather\", \"parameters\": {\"type\": \"object\", "
      "\"properties\": {\"city\": {\"type\": \"string\"}}}}";
  ASSERT_EQ(prompt.rfind(kBos + "\n\n## Tools\n\nYou have access to a set of tools", 0), 0u) << prompt;
  EXPECT_NE(prompt.find("writing a \"<" + kDsml + "function_calls>\" block"), std::string::npos);
  EXPECT_NE(prompt.find("<functions>\n" + schema + "\n</functions>\n" + kUser + "Weather?" + kAssistant + "</think>"),
            std::string::npos)
      << prompt;
}

TEST(DeepseekV32Prompt, CallsAndTheirResults) {
  const Json calls = Json::array(
      {{{"type", "function"},
        {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\", \"days\": 3}"}}}},
       {{"type", "function"}, {"function", {{"name", "get_time"}, {"arguments", {{"zones", {"CET", "UTC"}}}}}}}});
  const Json messages = Json::array({{{"role", "user"}, {"content", "Q"}},
                                     {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", calls}},
                                     {{"role", "tool"}, {"content", "Sunny"}},
                                     {{"role", "tool"}, {"content", "12:00"}}});
  const std::string expected =
      kBos + kUser + "Q" + kAssistant + "</think>\n\n<" + kDsml + "function_calls>\n<" + kDsml +
      "invoke name=\"get_weather\">\n<" + kDsml + "parameter name=\"city\" string=\"true\">Paris</" + kDsml +
      "parameter>\n<" + kDsml + "parameter name=\"days\" string=\"false\">3</" + kDsml + "parameter>\n</" + kDsml +
      "invoke>\n<" + kDsml + "invoke name=\"get_time\">\n<" + kDsml +
      "parameter name=\"zones\" string=\"false\">[\"CET\", \"UTC\"]</" + kDsml + "parameter>\n</" + kDsml +
      "invoke>\n</" + kDsml + "function_calls>" + kEos +
      "\n\n<function_results>\n<result>Sunny</result>\n<result>12:00</result>\n</function_results>\n\n</think>";
  EXPECT_EQ(render(messages), expected);
  // Thinking mode: the last user turn opens the reasoning, the call turn closes it (no reasoning
  // given), and the results open it again.
  std::string thinking = expected;
  const std::string opened = kAssistant + "</think>";
  thinking.replace(thinking.find(opened), opened.size(), kAssistant + "<think></think>");
  thinking.replace(thinking.size() - 8, 8, "<think>");
  EXPECT_EQ(render(messages, nullptr, true), thinking);
}

TEST(DeepseekV32Prompt, RefusesWhatTheFormatCannotHold) {
  EXPECT_THROW(render(Json::array({{{"role", "tool"}, {"content", "x"}}})), Error);
  EXPECT_THROW(render(Json::array({{{"role", "critic"}, {"content", "x"}}})), Error);
  const Json bad_call = Json::array({{{"function", {{"name", "f"}, {"arguments", "[1]"}}}}});
  EXPECT_THROW(render(Json::array({{{"role", "assistant"}, {"tool_calls", bad_call}}})), Error);
}

ChatOutputConfig dsml_config() { return testing::tools_config("deepseek_v32"); }

TEST(DeepseekV32ToolParser, CallsInOneBlockWholeAndInEveryChunking) {
  const std::string text =
      "Let me check.\n\n<" + kDsml + "function_calls>\n<" + kDsml + "invoke name=\"get_weather\">\n<" + kDsml +
      "parameter name=\"city\" string=\"true\">S\xC3\xA3o \"Paulo\"</" + kDsml + "parameter>\n<" + kDsml +
      "parameter name=\"days\" string=\"false\">3</" + kDsml + "parameter>\n</" + kDsml + "invoke>\n<" + kDsml +
      "invoke name=\"get_time\">\n</" + kDsml + "invoke>\n</" + kDsml + "function_calls>";
  testing::expect_answer(
      dsml_config(), text,
      Answer{"Let me check.",
             "",
             {{"get_weather", "{\"city\": \"S\xC3\xA3o \\\"Paulo\\\"\", \"days\": 3}"}, {"get_time", "{}"}}});
}

TEST(DeepseekV32ToolParser, NonStringValuesAreJsonOrPythonLiteralsElseText) {
  const std::string text = "<" + kDsml + "function_calls>\n<" + kDsml + "invoke name=\"f\">\n<" + kDsml +
                           "parameter name=\"a\" string=\"false\">[1, 2]</" + kDsml + "parameter>\n<" + kDsml +
                           "parameter name=\"b\" string=\"false\">True</" + kDsml + "parameter>\n<" + kDsml +
                           "parameter name=\"c\" string=\"false\">not json</" + kDsml + "parameter>\n</" + kDsml +
                           "invoke>\n</" + kDsml + "function_calls>";
  testing::expect_answer(dsml_config(), text,
                         Answer{"", "", {{"f", "{\"a\": [1, 2], \"b\": true, \"c\": \"not json\"}"}}});
}

TEST(DeepseekV32ToolParser, PlainAnswersAndNonCallsAreContent) {
  testing::expect_answer(dsml_config(), "No tools: a < b, and <think> is text.",
                         Answer{"No tools: a < b, and <think> is text.", "", {}});
  const std::string stray = "<" + kDsml + "function_calls>\nnot an invoke";
  testing::expect_answer(dsml_config(), stray, Answer{"not an invoke", "", {}});
}

TEST(DeepseekV32ToolParser, AnAnswerCutInsideACallKeepsTheCallWithItsClosedParameters) {
  const std::string text = "<" + kDsml + "function_calls>\n<" + kDsml + "invoke name=\"f\">\n<" + kDsml +
                           "parameter name=\"a\" string=\"true\">x</" + kDsml + "parameter>\n<" + kDsml +
                           "parameter name=\"b\" string=\"true\">cut";
  testing::expect_answer(dsml_config(), text, Answer{"", "", {{"f", "{\"a\": \"x\"}"}}});
}

// Calls rendered into an assistant turn by the prompt renderer read back as the same calls.
TEST(DeepseekV32Chat, RenderedCallsParseBackToTheConversationsCalls) {
  const Json arguments = {
      {"city", "Z\xC3\xBCrich"}, {"days", 2}, {"units", {{"temp", "C"}, {"wind", nullptr}}}, {"ok", false}};
  const Json calls =
      Json::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", arguments.dump()}}}},
                   {{"type", "function"}, {"function", {{"name", "noop"}, {"arguments", "{}"}}}}});
  const std::string prompt = render(Json::array(
      {{{"role", "user"}, {"content", "Q"}}, {{"role", "assistant"}, {"content", "On it."}, {"tool_calls", calls}}}));
  const std::string turn_start = kAssistant + "</think>";
  const size_t begin = prompt.find(turn_start) + turn_start.size();
  const std::string answer = prompt.substr(begin, prompt.size() - begin - kEos.size());
  const Answer parsed = testing::run_chunks(dsml_config(), testing::split_every(answer, 3));
  EXPECT_EQ(parsed.content, "On it.");
  ASSERT_EQ(parsed.calls.size(), 2u) << answer;
  EXPECT_EQ(parsed.calls[0].first, "get_weather");
  EXPECT_EQ(Json::parse(parsed.calls[0].second), arguments);
  EXPECT_EQ(parsed.calls[1].first, "noop");
  EXPECT_EQ(Json::parse(parsed.calls[1].second), Json::object());
}

TEST(DeepseekV32Chat, TheNativeRendererPicksItsParsers) {
  EXPECT_EQ(tool_parser_for_template(tokenizer::kDeepseekV32NativeTemplate), "deepseek_v32");
  EXPECT_EQ(reasoning_parser_for_template(tokenizer::kDeepseekV32NativeTemplate), "deepseek_v3");
  EXPECT_TRUE(is_tool_parser_name("deepseek_v32"));
}

}  // namespace
}  // namespace tachyon::server::deepseek_v32_chat_test
