// POST /v1/messages (the Anthropic Messages API) over real HTTP on the tiny Qwen3 model:
// validation errors in Anthropic's shape with the right status, naming the fields the client sent;
// a whole message, a streamed one whose events follow Anthropic's order and whose text deltas
// concatenate to the whole text, stop_sequences -> stop_reason "stop_sequence", max_tokens ->
// "max_tokens"; a final assistant message continued as a prefill; the body's nesting limit on a
// tool_use input; metadata.user_id; /v1/messages/count_tokens.
#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "server_fixture.h"
#include "tachyon/server/openai_request_fields.h"

namespace tachyon::server::testing {
namespace {

using nlohmann::json;

std::string messages_text(const json& message) {
  std::string text;
  for (const json& block : message["content"]) {
    if (block["type"] == "text") text += block["text"].get<std::string>();
  }
  return text;
}

class ServerMessages : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerUnderTest(); }
  static void TearDownTestSuite() { delete server_; }
  static httplib::Result post(const std::string& body) {
    return server_->client().Post("/v1/messages", body, "application/json");
  }
  static json whole(const std::string& fields) {
    auto r = post(R"({"model":"tiny","messages":[{"role":"user","content":"Tell me a story"}],"temperature":0,)" +
                  fields + "}");
    EXPECT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  // A 400 whose message names `field` (quoted, as the client spelled it).
  static void expect_refused_naming(const std::string& body, const std::string& field) {
    auto r = post(body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body << " -> " << r->body;
    const std::string message = json::parse(r->body)["error"]["message"];
    EXPECT_NE(message.find("'" + field + "'"), std::string::npos) << field << ": " << message;
    // Never the chat body's names the request was converted into, nor its bracketed paths.
    for (const char* chat : {"function", "parameters", "max_completion_tokens", "'stop'", "'stop.", "["}) {
      EXPECT_EQ(message.find(chat), std::string::npos) << chat << " in: " << message;
    }
  }
  static json tokenize(const json& body) {
    auto r = server_->client().Post("/tokenize", body.dump(), "application/json");
    EXPECT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body);
  }
  static ServerUnderTest* server_;
};
ServerUnderTest* ServerMessages::server_ = nullptr;

TEST_F(ServerMessages, ValidationErrorsAreAnthropicShaped) {
  struct Case {
    std::string body;
    int status;
    std::string type;
  };
  const std::string user = R"("messages":[{"role":"user","content":"hi"}])";
  const std::vector<Case> cases = {
      {R"({"model":"tiny",)" + user + "}", 400, "invalid_request_error"},                     // no max_tokens
      {R"({"model":"tiny","max_tokens":0,)" + user + "}", 400, "invalid_request_error"},
      {R"({"max_tokens":5,)" + user + "}", 400, "invalid_request_error"},                     // no model
      {R"({"model":"other","max_tokens":5,)" + user + "}", 404, "not_found_error"},
      {R"({"model":"tiny","max_tokens":5,"messages":[]})", 400, "invalid_request_error"},
      {R"({"model":"tiny","max_tokens":5,"messages":[{"role":"system","content":"x"}]})", 400, "invalid_request_error"},
      {R"({"model":"tiny","max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})",
       400, "invalid_request_error"},
      {R"({"model":"tiny","max_tokens":5,"stop_sequences":"x",)" + user + "}", 400, "invalid_request_error"},
      {R"({"model":"tiny","max_tokens":5,"temperature":-1,)" + user + "}", 400, "invalid_request_error"},
      {R"({"model":"tiny","max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"object"}}],)"
       R"("tool_choice":{"type":"some"},)" + user + "}", 400, "invalid_request_error"},
      {R"({"model":"tiny","max_tokens":5,"tools":[{"name":"f"}],)" + user + "}", 400, "invalid_request_error"},
      {R"({"model":"tiny","max_tokens":5,"thinking":{"type":"enabled"},)" + user + "}", 400, "invalid_request_error"},
      {"{not json", 400, "invalid_request_error"},
  };
  for (const Case& c : cases) {
    auto r = post(c.body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, c.status) << c.body << " -> " << r->body;
    json error = json::parse(r->body);
    EXPECT_EQ(error["type"], "error") << r->body;
    EXPECT_EQ(error["error"]["type"], c.type) << r->body;
    EXPECT_FALSE(error["error"]["message"].get<std::string>().empty());
  }
  auto image = post(cases[6].body);
  EXPECT_NE(image->body.find("image"), std::string::npos) << image->body;
  json ok = whole(R"("max_tokens":2)");
  EXPECT_EQ(ok["type"], "message");
}

TEST_F(ServerMessages, WholeMessage) {
  json m = whole(R"("max_tokens":8,"system":[{"type":"text","text":"Be brief."}],"metadata":{"user_id":"u"},)"
                 R"("thinking":{"type":"disabled"})");
  EXPECT_EQ(m["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_EQ(m["model"], "tiny");
  ASSERT_TRUE(m["content"].is_array());
  EXPECT_GT(m["usage"]["input_tokens"].get<int>(), 0);
  const int output = m["usage"]["output_tokens"].get<int>();
  EXPECT_GT(output, 0);
  const std::string reason = m["stop_reason"];
  EXPECT_TRUE(reason == "end_turn" || reason == "max_tokens") << reason;
  EXPECT_EQ(reason == "max_tokens", output == 8) << m.dump();
  EXPECT_TRUE(m["stop_sequence"].is_null());
}

TEST_F(ServerMessages, StreamedDeltasConcatenateToTheWholeText) {
  const std::string fields = R"("max_tokens":12,"thinking":{"type":"disabled"})";
  json m = whole(fields);
  auto r = post(R"({"model":"tiny","messages":[{"role":"user","content":"Tell me a story"}],"temperature":0,"stream":true,)" +
                fields + "}");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  std::vector<NamedSseEvent> events = named_sse_events(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().name, "message_start");
  EXPECT_EQ(events.front().data["message"]["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(events[events.size() - 2].name, "message_delta");
  EXPECT_EQ(events.back().name, "message_stop");
  std::string text;
  int open = -1;
  for (const NamedSseEvent& e : events) {
    if (e.name == "content_block_start") {
      EXPECT_EQ(open, -1);
      open = e.data["index"];
    } else if (e.name == "content_block_stop") {
      EXPECT_EQ(e.data["index"], open);
      open = -1;
    } else if (e.name == "content_block_delta" && e.data["delta"]["type"] == "text_delta") {
      EXPECT_EQ(e.data["index"], open);
      text += e.data["delta"]["text"].get<std::string>();
    }
  }
  EXPECT_EQ(open, -1);
  EXPECT_EQ(text, messages_text(m));
  const json& end = events[events.size() - 2].data;
  EXPECT_EQ(end["delta"]["stop_reason"], m["stop_reason"]);
  EXPECT_EQ(end["usage"]["output_tokens"], m["usage"]["output_tokens"]);
}

TEST_F(ServerMessages, MaxTokensAndStopSequenceStopReasons) {
  json one = whole(R"("max_tokens":1)");
  if (one["usage"]["output_tokens"] == 1 && one["stop_reason"] != "end_turn") {
    EXPECT_EQ(one["stop_reason"], "max_tokens");
  }
  json m = whole(R"("max_tokens":16,"thinking":{"type":"disabled"})");
  const std::string text = messages_text(m);
  // A stop string taken from the middle of the answer, on code point boundaries.
  size_t begin = text.size() / 2;
  while (begin > 0 && (static_cast<unsigned char>(text[begin]) & 0xC0) == 0x80) --begin;
  size_t end = begin + 1;
  while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
  ASSERT_LT(begin, text.size()) << m.dump();
  const std::string stop = text.substr(begin, end - begin);
  json stopped = whole(R"("max_tokens":16,"thinking":{"type":"disabled"},"stop_sequences":[)" + json(stop).dump() + "]");
  EXPECT_EQ(stopped["stop_reason"], "stop_sequence") << stopped.dump();
  EXPECT_EQ(stopped["stop_sequence"], stop);
  EXPECT_EQ(messages_text(stopped), text.substr(0, text.find(stop)));
}

// Every 400 names the field the client sent, in Anthropic's spelling ("messages.2.content.0.text"),
// also when the chat parser that validates the converted body found it ("stop" -> "stop_sequences",
// "tools[0].function.parameters" -> "tools.0.input_schema").
TEST_F(ServerMessages, ErrorsNameTheFieldsTheClientSent) {
  const std::string head = R"({"model":"tiny",)";
  const std::string user = R"("messages":[{"role":"user","content":"hi"}])";
  const std::string tool = R"({"name":"f","input_schema":{"type":"object"}})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"("max_tokens":5,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"a"},)"
       R"({"role":"user","content":[{"type":"text"}]}])", "messages.2.content.0.text"},
      {R"("max_tokens":5,"messages":[{"role":"system","content":"x"}])", "messages.0.role"},
      {R"("max_tokens":0,)" + user, "max_tokens"},
      {R"("max_tokens":5,"stop_sequences":[""],)" + user, "stop_sequences"},
      {R"("max_tokens":5,"stop_sequences":["a",1],)" + user, "stop_sequences.1"},
      {R"("max_tokens":5,"stop_sequences":[")" + std::string(2000, 'x') + R"("],)" + user, "stop_sequences.0"},
      {R"("max_tokens":5,"tools":[{"name":"bad name","input_schema":{"type":"object"}}],)" + user, "tools.0.name"},
      {R"("max_tokens":5,"tools":[{"name":"f","input_schema":{"type":"string"}}],)" + user, "tools.0.input_schema"},
      {R"("max_tokens":5,"tool_choice":{"type":"any"},)" + user, "tool_choice"},
      {R"("max_tokens":5,"tools":[)" + tool + R"(],"tool_choice":{"type":"tool","name":"g"},)" + user,
       "tool_choice.name"},
      {R"("max_tokens":5,"temperature":-1,)" + user, "temperature"},
      {R"("max_tokens":5,"thinking":{"type":"enabled","budget_tokens":0},)" + user, "thinking.budget_tokens"},
  };
  for (const auto& [fields, field] : cases) expect_refused_naming(head + fields + "}", field);
}

// The body may nest ServerLimits::max_json_depth levels (the body is level 1), wherever its depth
// comes from: a tool_use input (or a tool's input_schema) that reaches the limit exactly is taken
// (the chat body it becomes nests it one level deeper), one level more is a 400 naming it.
TEST_F(ServerMessages, ToolInputsMayNestToTheBodyLimit) {
  const int limit = server_->context->limits().max_json_depth;
  const auto nested = [](int levels) {  // `levels` objects, one inside the other
    std::string value = "1";
    for (int i = 0; i < levels; ++i) value = R"({"a":)" + value + "}";
    return value;
  };
  // The input is level 6: body, messages, message, content, block, input.
  const auto with_input = [&](int levels) {
    return R"({"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"hi"},)"
           R"({"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":)" +
           nested(levels) + R"(}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1",)"
           R"("content":"ok"}]}]})";
  };
  auto at_limit = post(with_input(limit - 5));
  ASSERT_TRUE(at_limit);
  EXPECT_EQ(at_limit->status, 200) << at_limit->body;
  expect_refused_naming(with_input(limit - 4), "messages.1.content.0.input");
  // The input_schema is level 4: body, tools, tool, input_schema.
  const auto with_schema = [&](int levels) {
    return R"({"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"hi"}],)"
           R"("tools":[{"name":"f","input_schema":{"type":"object","a":)" + nested(levels - 1) + "}}]}";
  };
  auto schema_at_limit = post(with_schema(limit - 3));
  ASSERT_TRUE(schema_at_limit);
  EXPECT_EQ(schema_at_limit->status, 200) << schema_at_limit->body;
  expect_refused_naming(with_schema(limit - 2), "tools.0.input_schema");
  // Elsewhere, the top-level field that holds the nesting.
  expect_refused_naming(R"({"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"hi"}],"metadata":)" +
                            nested(limit) + "}",
                        "metadata");
}

TEST_F(ServerMessages, MetadataUserIdIsAShortString) {
  const std::string head = R"({"model":"tiny","max_tokens":1,"messages":[{"role":"user","content":"hi"}],)";
  expect_refused_naming(head + R"("metadata":{"user_id":5}})", "metadata.user_id");
  expect_refused_naming(head + R"("metadata":{"user_id":")" + std::string(fields::kMaxUserBytes + 1, 'u') + R"("}})",
                        "metadata.user_id");
  expect_refused_naming(head + R"("metadata":"u"})", "metadata");
  // At the limit, null, and with keys this server does not read (ignored, as other unmapped fields).
  for (const std::string& metadata : {R"({"user_id":")" + std::string(fields::kMaxUserBytes, 'u') + R"(","x":1})",
                                      std::string(R"({"user_id":null})"), std::string(R"({"other":[1]})")}) {
    auto r = post(head + R"("metadata":)" + metadata + "}");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << metadata << " -> " << r->body;
  }
}

// A final assistant message is a prefill: the prompt is the conversation before it with the
// generation prompt, then its text, and the answer holds only the continuation. For the Qwen3
// template with thinking off that is vLLM's continue_final_message: the conversation rendered with
// the assistant turn, cut after its text. The continuation equals what /v1/completions gives for
// that very prompt.
TEST_F(ServerMessages, FinalAssistantMessageIsAPrefillTheAnswerContinues) {
  const std::string prefill = "Once upon a time";
  const json user = {{"role", "user"}, {"content", "Tell me a story"}};
  const json no_thinking = {{"enable_thinking", false}};
  std::vector<int32_t> prompt =
      tokenize({{"messages", json::array({user})}, {"chat_template_kwargs", no_thinking}})["tokens"];
  const std::vector<int32_t> text = tokenize({{"prompt", prefill}, {"add_special_tokens", false}})["tokens"];
  prompt.insert(prompt.end(), text.begin(), text.end());
  const json assistant = {{"role", "assistant"}, {"content", prefill}};
  const std::vector<int32_t> turn = tokenize({{"messages", json::array({user, assistant})},
                                              {"chat_template_kwargs", no_thinking},
                                              {"add_generation_prompt", false}})["tokens"];
  ASSERT_GT(turn.size(), prompt.size());
  EXPECT_EQ(std::vector<int32_t>(turn.begin(), turn.begin() + static_cast<int64_t>(prompt.size())), prompt);

  const json blocks = json::array({{{"type", "text"}, {"text", prefill}}});
  const json as_blocks = {{"role", "assistant"}, {"content", blocks}};
  const json messages = json::array({user, as_blocks});
  auto r = post(json({{"model", "tiny"}, {"max_tokens", 8}, {"temperature", 0}, {"messages", messages}}).dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json m = json::parse(r->body);
  EXPECT_EQ(m["usage"]["input_tokens"], prompt.size());
  auto completion = server_->client().Post(
      "/v1/completions", json({{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}}).dump(), "application/json");
  ASSERT_TRUE(completion);
  ASSERT_EQ(completion->status, 200) << completion->body;
  const json c = json::parse(completion->body);
  EXPECT_EQ(m["usage"]["output_tokens"], c["usage"]["completion_tokens"]);
  EXPECT_EQ(messages_text(m), c["choices"][0]["text"].get<std::string>()) << m.dump();
}

// OpenAI's chat route with vLLM's continue_final_message takes the same prompt and gives the same
// continuation as the Anthropic prefill above; what cannot continue a text is refused, naming it.
TEST_F(ServerMessages, ChatContinueFinalMessageIsTheSamePrefill) {
  const std::string prefill = "Once upon a time";
  const json user = {{"role", "user"}, {"content", "Tell me a story"}};
  const json assistant = {{"role", "assistant"}, {"content", prefill}};
  auto chat = [&](const json& extra) {
    json body = {{"model", "tiny"}, {"max_tokens", 8}, {"temperature", 0}, {"messages", json::array({user, assistant})},
                 {"continue_final_message", true}, {"add_generation_prompt", false}};
    body.update(extra);
    return server_->client().Post("/v1/chat/completions", body.dump(), "application/json");
  };
  auto r = chat(json::object());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json c = json::parse(r->body);
  auto m = post(json({{"model", "tiny"}, {"max_tokens", 8}, {"temperature", 0}, {"messages", json::array({user, assistant})}})
                    .dump());
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  const json anthropic = json::parse(m->body);
  // The same prompt (Anthropic's input_tokens leave the prefix cache's reads out).
  const json& usage = anthropic["usage"];
  EXPECT_EQ(c["usage"]["prompt_tokens"],
            usage["input_tokens"].get<int64_t>() + usage["cache_read_input_tokens"].get<int64_t>());
  EXPECT_EQ(c["choices"][0]["message"]["content"].get<std::string>(), messages_text(anthropic)) << c.dump();
  const std::vector<std::pair<json, std::string>> refused = {
      {{{"add_generation_prompt", true}}, "add_generation_prompt"},
      {{{"chat_template_kwargs", {{"enable_thinking", true}}}}, "chat_template_kwargs"},
      {{{"messages", json::array({user})}}, "continue_final_message"},
      {{{"response_format", {{"type", "json_object"}}}}, "response_format"},
      {{{"tools", json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}})}, {"tool_choice", "required"}},
       "tool_choice"},
  };
  for (const auto& [extra, param] : refused) {
    auto bad = chat(extra);
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400) << extra.dump() << " -> " << bad->body;
    EXPECT_EQ(json::parse(bad->body)["error"]["param"], param) << bad->body;
  }
}

// count_tokens counts the prompt /v1/messages runs for the same body: system, tools and a
// prefill included; max_tokens is not needed. Errors are Anthropic's, as on /v1/messages.
TEST_F(ServerMessages, CountTokensIsTheInputTokensOfTheSameMessages) {
  const json tools = json::array({{{"name", "weather"}, {"description", "Weather of a city"},
                                   {"input_schema", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}});
  const json user = {{"role", "user"}, {"content", "What is the weather in Paris?"}};
  const json prefill = {{"role", "assistant"}, {"content", "Let me"}};
  const std::vector<json> bodies = {
      {{"model", "tiny"}, {"messages", json::array({user})}},
      {{"model", "tiny"}, {"system", "Be brief."}, {"tools", tools}, {"messages", json::array({user})}},
      {{"model", "tiny"}, {"messages", json::array({user, prefill})}},
  };
  std::set<int64_t> counts;
  for (const json& body : bodies) {
    auto counted = server_->client().Post("/v1/messages/count_tokens", body.dump(), "application/json");
    ASSERT_TRUE(counted);
    ASSERT_EQ(counted->status, 200) << counted->body;
    json answered = body;
    answered["max_tokens"] = 2;
    auto r = post(answered.dump());
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const int64_t input_tokens = json::parse(counted->body)["input_tokens"];
    EXPECT_EQ(input_tokens, json::parse(r->body)["usage"]["input_tokens"].get<int64_t>()) << body.dump();
    counts.insert(input_tokens);
  }
  EXPECT_EQ(counts.size(), bodies.size()) << "the system prompt, the tools and the prefill each count";
  auto bad = server_->client().Post("/v1/messages/count_tokens", R"({"model":"tiny","messages":[]})", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["type"], "error") << bad->body;
  EXPECT_EQ(json::parse(bad->body)["error"]["type"], "invalid_request_error") << bad->body;
  auto other = server_->client().Post("/v1/messages/count_tokens", R"({"model":"other","messages":[)" + user.dump() + "]}",
                                      "application/json");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404) << other->body;
}

// What cannot continue a prefill is refused, naming it: other blocks than text in it, text that
// ends in whitespace, thinking, a forced tool call. Tools offered with tool_choice auto are fine.
TEST_F(ServerMessages, PrefillRefusesWhatCannotContinueIt) {
  const std::string head = R"({"model":"tiny","max_tokens":2,)";
  const std::string user = R"({"role":"user","content":"hi"})";
  const std::string tools = R"("tools":[{"name":"f","input_schema":{"type":"object"}}],)";
  const auto ending_with = [&](const std::string& assistant) {
    return R"("messages":[)" + user + R"(,{"role":"assistant","content":)" + assistant + "}]}";
  };
  expect_refused_naming(head + ending_with(R"([{"type":"text","text":"Sure"},)"
                                           R"({"type":"tool_use","id":"toolu_1","name":"f","input":{}}])"),
                        "messages.1.content.1");
  expect_refused_naming(head + ending_with(R"([{"type":"thinking","thinking":"hm","signature":""},)"
                                           R"({"type":"text","text":"Sure"}])"),
                        "messages.1.content.0");
  expect_refused_naming(head + ending_with(R"("Once upon ")"), "messages.1.content");
  expect_refused_naming(head + R"("thinking":{"type":"enabled","budget_tokens":16},)" + ending_with(R"("Once")"),
                        "thinking");
  expect_refused_naming(head + tools + R"("tool_choice":{"type":"any"},)" + ending_with(R"("Once")"), "tool_choice");
  expect_refused_naming(head + tools + R"("tool_choice":{"type":"tool","name":"f"},)" + ending_with(R"("Once")"),
                        "tool_choice");
  const std::string thinking_off = R"("thinking":{"type":"disabled"},)";
  for (const std::string& fields : {tools + R"("tool_choice":{"type":"auto"},)", thinking_off}) {
    auto r = post(head + fields + ending_with(R"("Once")"));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << fields << " -> " << r->body;
  }
}

// A forced tool call whose schema the engine cannot follow (every '[' doubles the parses still
// open: an item is an `a` or a `b`, both arrays, past the parser's budget within a few tokens) is
// answered with an error saying why, not a cut tool_use input: a 400 whole, an error event streamed.
TEST_F(ServerMessages, AnswerTheEngineGaveUpOnIsAnErrorSayingWhy) {
  const json schema = ambiguous_schema();
  json body = {{"model", "tiny"},
               {"max_tokens", 64},
               {"temperature", 0},
               {"thinking", {{"type", "disabled"}}},
               {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
               {"tools", json::array({{{"name", "f"}, {"input_schema", schema}}})},
               {"tool_choice", {{"type", "tool"}, {"name", "f"}}}};
  auto whole = post(body.dump());
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->status, 400) << whole->body;
  const json error = json::parse(whole->body);
  EXPECT_EQ(error["error"]["type"], "invalid_request_error") << whole->body;
  const std::string why = error["error"]["message"];
  EXPECT_NE(why.find("too ambiguous"), std::string::npos) << why;
  body["stream"] = true;
  auto streamed = post(body.dump());
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  const std::vector<NamedSseEvent> events = named_sse_events(streamed->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.front().name, "message_start");
  EXPECT_EQ(events.back().name, "error") << streamed->body;
  EXPECT_EQ(events.back().data["error"]["message"], why);
}

}  // namespace
}  // namespace tachyon::server::testing
