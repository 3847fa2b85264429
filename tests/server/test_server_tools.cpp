// Tools over real HTTP on the tiny Qwen3 model (its template teaches the Hermes format, and the
// server picks the hermes tool parser and the qwen3 reasoning parser from it). Random weights
// never write a tool call, so the call shapes are pinned by tests/unit/test_chat_output.cpp on
// the same assembly functions the route uses; here: tool_choice validation answers OpenAI-shaped
// 400s naming the field, and with tools offered a plain answer still comes back whole and
// streamed alike, as content with finish_reason "stop". Forced calls (tool_choice required or
// named), which the grammar makes even a random model write: tests/server/openai_tool_choice_client.cjs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server_fixture.h"

namespace tachyon::server::testing {
namespace {

using nlohmann::json;

const std::string kTools =
    R"("tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city",)"
    R"("parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}])";
const std::string kMessages = R"("messages":[{"role":"user","content":"Weather in Paris?"}])";

class ServerTools : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerUnderTest(); }
  static void TearDownTestSuite() { delete server_; }
  static httplib::Result chat(const std::string& fields) {
    return server_->client().Post("/v1/chat/completions", "{" + kMessages + "," + fields + "}", "application/json");
  }
  static ServerUnderTest* server_;
};
ServerUnderTest* ServerTools::server_ = nullptr;

TEST_F(ServerTools, TheModelsParsersAreChosenFromItsTemplate) {
  EXPECT_EQ(server_->context->chat_parsers().tool, "hermes");
  EXPECT_EQ(server_->context->chat_parsers().reasoning, "qwen3");
}

TEST_F(ServerTools, ToolChoiceValidation) {
  struct Case {
    std::string fields, param;
  };
  const std::vector<Case> cases = {
      {kTools + R"(,"tool_choice":"required","guided_choice":["a"])", "tool_choice"},
      {kTools + R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}},"response_format":{"type":"json_object"})",
       "tool_choice"},
      {kTools + R"(,"tool_choice":{"type":"function","function":{"name":"get_time"}})", "tool_choice.function.name"},
      {kTools + R"(,"tool_choice":"maybe")", "tool_choice"},
      {kTools + R"(,"tool_choice":["auto"])", "tool_choice"},
      {R"("tool_choice":"required")", "tool_choice"},
      {kTools + R"(,"parallel_tool_calls":1)", "parallel_tool_calls"},
      {R"("tools":[{"type":"function"}])", "tools[0]"},
  };
  for (const Case& c : cases) {
    auto r = chat(c.fields);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << c.fields << " -> " << r->body;
    json error = json::parse(r->body)["error"];
    EXPECT_EQ(error["type"], "invalid_request_error") << r->body;
    EXPECT_EQ(error["param"], c.param) << r->body;
    EXPECT_FALSE(error["message"].get<std::string>().empty());
  }
  auto r = chat(kTools + R"(,"tool_choice":"required","guided_choice":["a"])");
  EXPECT_NE(r->body.find("cannot be combined"), std::string::npos) << r->body;
}

TEST_F(ServerTools, PlainAnswerWithToolsOfferedEndsWithStop) {
  // Greedy text first, then the same request stopped at its first ASCII letter: finish "stop".
  auto first = chat(kTools + R"(,"max_tokens":8,"temperature":0,"ignore_eos":true)");
  ASSERT_EQ(first->status, 200) << first->body;
  const std::string text = json::parse(first->body)["choices"][0]["message"]["content"];
  size_t at = 1;
  while (at < text.size() && !std::isalpha(static_cast<unsigned char>(text[at]))) ++at;
  if (at >= text.size()) GTEST_SKIP() << "no ASCII letter past the first byte in " << text;
  const std::string request =
      kTools + R"(,"tool_choice":"auto","max_tokens":8,"temperature":0,"stop":[)" + json(text.substr(at, 1)).dump() + "]";
  auto whole = chat(request);
  ASSERT_EQ(whole->status, 200) << whole->body;
  json choice = json::parse(whole->body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "stop") << whole->body;
  EXPECT_TRUE(choice["message"]["content"].is_string()) << whole->body;
  EXPECT_FALSE(choice["message"].contains("tool_calls")) << whole->body;
  EXPECT_EQ(choice["message"]["content"].get<std::string>(), text.substr(0, text.find(text[at], 1)));

  auto streamed = chat(request + R"(,"stream":true)");
  ASSERT_EQ(streamed->status, 200);
  std::string content, finish;
  for (const std::string& frame : sse_payloads(streamed->body)) {
    if (frame == "[DONE]") break;
    const json c = json::parse(frame)["choices"][0];
    EXPECT_FALSE(c["delta"].contains("tool_calls")) << frame;
    if (c["delta"].contains("content")) content += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  EXPECT_EQ(content, choice["message"]["content"].get<std::string>());
  EXPECT_EQ(finish, "stop");
}

TEST_F(ServerTools, ToolChoiceNoneAndAToolRoundTrip) {
  auto none = chat(kTools + R"(,"tool_choice":"none","max_tokens":2)");
  ASSERT_EQ(none->status, 200) << none->body;
  const std::string round_trip =
      R"({"messages":[{"role":"user","content":"Weather in Paris?"},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",)"
      R"("function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},)"
      R"({"role":"tool","tool_call_id":"call_1","content":"18 C, sunny"}],)" +
      kTools + R"(,"max_tokens":2,"chat_template_kwargs":{"enable_thinking":false}})";
  auto r = server_->client().Post("/v1/chat/completions", round_trip, "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["role"], "assistant");
}

}  // namespace
}  // namespace tachyon::server::testing
