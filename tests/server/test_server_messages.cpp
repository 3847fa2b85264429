// POST /v1/messages (the Anthropic Messages API) over real HTTP on the tiny Qwen3 model:
// validation errors in Anthropic's shape with the right status, a whole message, a streamed one
// whose events follow Anthropic's order and whose text deltas concatenate to the whole text,
// stop_sequences -> stop_reason "stop_sequence", max_tokens -> "max_tokens".
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server_fixture.h"

namespace tachyon::server::testing {
namespace {

using nlohmann::json;

struct MessagesSseEvent {
  std::string name;
  json data;
};

std::vector<MessagesSseEvent> messages_sse_events(const std::string& body) {
  std::vector<MessagesSseEvent> events;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    std::string frame = body.substr(pos, end - pos);
    pos = end + 2;
    MessagesSseEvent event;
    size_t line_end = frame.find('\n');
    EXPECT_EQ(frame.rfind("event: ", 0), 0u) << frame;
    event.name = frame.substr(7, line_end - 7);
    EXPECT_EQ(frame.compare(line_end + 1, 6, "data: "), 0) << frame;
    event.data = json::parse(frame.substr(line_end + 7));
    EXPECT_EQ(event.data["type"], event.name);
    events.push_back(std::move(event));
  }
  return events;
}

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
  std::vector<MessagesSseEvent> events = messages_sse_events(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().name, "message_start");
  EXPECT_EQ(events.front().data["message"]["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(events[events.size() - 2].name, "message_delta");
  EXPECT_EQ(events.back().name, "message_stop");
  std::string text;
  int open = -1;
  for (const MessagesSseEvent& e : events) {
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

}  // namespace
}  // namespace tachyon::server::testing
