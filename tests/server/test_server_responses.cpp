// POST /v1/responses (OpenAI's Responses API) over real HTTP on the tiny Qwen3 model: the answer
// is the chat route's for the same conversation (text and token counts, with instructions, input
// items, function calls and their outputs), streamed events come in the API's order with
// sequence numbers from 0 and deltas that concatenate to the whole answer, function calls and
// JSON-schema text come out as items, a token limit makes the response incomplete, a give-up of
// the engine is an error, and what the server cannot honour is refused naming the body's field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server_fixture.h"
#include "tachyon/server/responses_store.h"

namespace tachyon::server::testing::responses_test {
namespace {

using json = nlohmann::ordered_json;  // key order as sent: a template prints tools in it

// The text of a response's message items.
std::string output_text(const json& response) {
  std::string text;
  for (const json& item : response["output"]) {
    if (item["type"] != "message") continue;
    for (const json& part : item["content"]) text += part["text"].get<std::string>();
  }
  return text;
}

class ServerResponses : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerUnderTest(); }
  static void TearDownTestSuite() { delete server_; }
  static httplib::Result post(const std::string& path, const json& body) {
    return server_->client().Post(path, body.dump(), "application/json");
  }
  static json ok(const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r);
    EXPECT_EQ(r->status, 200) << body.dump() << " -> " << r->body;
    return json::parse(r->body);
  }
  // A 400 whose param is `field` and whose message quotes it, never the chat body's names.
  // `named`: what the message quotes when not the field itself (a schema's own path).
  static void expect_refused(const json& body, const std::string& field, const std::string& named = "") {
    auto r = post("/v1/responses", body);
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 400) << body.dump() << " -> " << r->body;
    const json error = json::parse(r->body)["error"];
    EXPECT_EQ(error["param"], field) << r->body;
    const std::string message = error["message"];
    EXPECT_NE(message.find(named.empty() ? field : named), std::string::npos) << field << ": " << message;
    for (const char* chat : {"max_completion_tokens", "response_format", "messages"}) {
      EXPECT_EQ(message.find(chat), std::string::npos) << chat << " in: " << message;
    }
  }
  static ServerUnderTest* server_;
};
ServerUnderTest* ServerResponses::server_ = nullptr;

const json kWeatherTools = json::array({{{"type", "function"},
                                  {"name", "get_weather"},
                                  {"description", "The weather in a city"},
                                  {"parameters",
                                   {{"type", "object"},
                                    {"properties", {{"city", {{"type", "string"}, {"maxLength", 12}}}}},
                                    {"required", json::array({"city"})}}}}});

TEST_F(ServerResponses, TheAnswerIsTheChatRoutesForTheSameConversation) {
  // instructions + a string input, and the same as items with a developer message, against chat.
  const json chat_messages = json::array({{{"role", "system"}, {"content", "You are terse."}},
                                          {{"role", "user"}, {"content", "Tell me a story"}},
                                          {{"role", "assistant"}, {"content", "Once there was a fox."}},
                                          {{"role", "user"}, {"content", "Go on"}}});
  const json chat = ok("/v1/chat/completions", {{"model", "tiny"}, {"messages", chat_messages},
                                                {"max_tokens", 24}, {"temperature", 0}});
  const json items = json::array(
      {{{"type", "message"}, {"role", "developer"}, {"content", "You are terse."}},
       {{"role", "user"}, {"content", json::array({{{"type", "input_text"}, {"text", "Tell me a story"}}})}},
       {{"type", "message"}, {"role", "assistant"},
        {"content", json::array({{{"type", "output_text"}, {"text", "Once there was a fox."}}})}},
       {{"role", "user"}, {"content", "Go on"}}});
  for (const json& body : {json{{"input", items}}, json{{"instructions", "You are terse."}, {"input", items}}}) {
    json request = body;
    if (request.contains("instructions")) request["input"].erase(0);
    request.update({{"model", "tiny"}, {"max_output_tokens", 24}, {"temperature", 0}});
    const json response = ok("/v1/responses", request);
    EXPECT_EQ(response["object"], "response");
    EXPECT_EQ(response["id"].get<std::string>().rfind("resp_", 0), 0u);
    EXPECT_EQ(output_text(response), chat["choices"][0]["message"]["content"]) << response.dump();
    EXPECT_EQ(response["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
    EXPECT_EQ(response["usage"]["output_tokens"], chat["usage"]["completion_tokens"]);
    EXPECT_EQ(response["usage"]["total_tokens"], chat["usage"]["total_tokens"]);
    const bool cut = chat["choices"][0]["finish_reason"] == "length";
    EXPECT_EQ(response["status"], cut ? "incomplete" : "completed");
    EXPECT_EQ(response["output"].back()["status"], cut ? "incomplete" : "completed");
    if (cut) {
      EXPECT_EQ(response["incomplete_details"]["reason"], "max_output_tokens");
    }
    EXPECT_EQ(response["max_output_tokens"], 24);  // echoed
    EXPECT_EQ(response["instructions"], request.value("instructions", json(nullptr)));
  }
}

TEST_F(ServerResponses, StreamedEventsAreOrderedAndConcatenateToTheWholeAnswer) {
  const json body = {{"model", "tiny"}, {"input", "Tell me a story"}, {"max_output_tokens", 16}, {"temperature", 0},
                     {"metadata", {{"run", "a"}}}};
  const json whole = ok("/v1/responses", body);
  json streamed_body = body;
  streamed_body["stream"] = true;
  auto r = post("/v1/responses", streamed_body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::vector<NamedSseEvent> events = named_sse_events(r->body);
  ASSERT_GE(events.size(), 8u) << r->body;
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].data["sequence_number"], i) << events[i].name;
  EXPECT_EQ(events[0].name, "response.created");
  EXPECT_EQ(events[0].data["response"]["status"], "in_progress");
  EXPECT_EQ(events[1].name, "response.in_progress");
  EXPECT_EQ(events[2].name, "response.output_item.added");
  EXPECT_EQ(events[3].name, "response.content_part.added");
  std::string deltas;
  size_t i = 4;
  for (; i < events.size() && events[i].name == "response.output_text.delta"; ++i) {
    deltas += events[i].data["delta"].get<std::string>();
  }
  ASSERT_LE(i + 4, events.size()) << r->body;
  EXPECT_EQ(events[i].name, "response.output_text.done");
  EXPECT_EQ(events[i].data["text"], deltas);
  EXPECT_EQ(events[i + 1].name, "response.content_part.done");
  EXPECT_EQ(events[i + 2].name, "response.output_item.done");
  const NamedSseEvent& last = events.back();
  EXPECT_EQ(i + 4, events.size());
  EXPECT_TRUE(last.name == "response.completed" || last.name == "response.incomplete") << last.name;
  const json& final = last.data["response"];
  EXPECT_EQ(deltas, output_text(whole));
  EXPECT_EQ(output_text(final), deltas);
  EXPECT_EQ(final["usage"], whole["usage"]);
  EXPECT_EQ(final["metadata"]["run"], "a");
  EXPECT_EQ(final["id"], events[0].data["response"]["id"]);
}

TEST_F(ServerResponses, FunctionCallsAreItemsAndTheirOutputsGoBackAsTheChatRoutesToolMessages) {
  const json body = {{"model", "tiny"}, {"input", "Weather in Paris?"}, {"tools", kWeatherTools},
                     {"tool_choice", "required"}, {"max_output_tokens", 200}, {"temperature", 0}};
  const json response = ok("/v1/responses", body);
  ASSERT_EQ(response["status"], "completed") << response.dump();
  const json& call = response["output"].back();
  ASSERT_EQ(call["type"], "function_call") << response.dump();
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["status"], "completed");
  EXPECT_EQ(call["id"].get<std::string>().rfind("fc_", 0), 0u);
  const json arguments = json::parse(call["arguments"].get<std::string>());
  EXPECT_TRUE(arguments["city"].is_string()) << call.dump();
  // Streamed: the argument deltas concatenate to the done event's arguments and the item's.
  json streamed_body = body;
  streamed_body["stream"] = true;
  auto r = post("/v1/responses", streamed_body);
  ASSERT_TRUE(r);
  std::string deltas;
  std::string done;
  for (const NamedSseEvent& e : named_sse_events(r->body)) {
    if (e.name == "response.function_call_arguments.delta") deltas += e.data["delta"].get<std::string>();
    if (e.name == "response.function_call_arguments.done") done = e.data["arguments"];
  }
  EXPECT_EQ(deltas, call["arguments"]);
  EXPECT_EQ(done, call["arguments"]);
  // The call and its output sent back: the chat route's answer to the same conversation.
  const json items = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}},
                                  {{"type", "function_call"}, {"call_id", "call_1"}, {"name", "get_weather"},
                                   {"arguments", R"({"city": "Paris"})"}},
                                  {{"type", "function_call_output"}, {"call_id", "call_1"},
                                   {"output", "Sunny, 21 C"}}});
  const json answer = ok("/v1/responses", {{"model", "tiny"}, {"input", items}, {"tools", kWeatherTools},
                                           {"max_output_tokens", 20}, {"temperature", 0}});
  const json chat_messages = json::array(
      {{{"role", "user"}, {"content", "Weather in Paris?"}},
       {{"role", "assistant"}, {"content", ""},
        {"tool_calls", json::array({{{"id", "call_1"}, {"type", "function"},
                                     {"function",
                                      {{"name", "get_weather"}, {"arguments", R"({"city": "Paris"})"}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "Sunny, 21 C"}}});
  json function = kWeatherTools[0];
  function.erase("type");
  const json chat_tools = json::array({{{"type", "function"}, {"function", function}}});
  const json chat = ok("/v1/chat/completions", {{"model", "tiny"}, {"messages", chat_messages},
                                                {"tools", chat_tools}, {"max_tokens", 20},
                                                {"temperature", 0}});
  EXPECT_EQ(answer["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
  EXPECT_EQ(output_text(answer), chat["choices"][0]["message"]["content"].get<std::string>());
}

TEST_F(ServerResponses, JsonSchemaTextFormatGivesJsonOfTheSchema) {
  const json schema = {{"type", "object"},
                       {"properties", {{"name", {{"type", "string"}, {"maxLength", 8}}},
                                       {"age", {{"type", "integer"}, {"minimum", 0}, {"maximum", 150}}}}},
                       {"required", json::array({"name", "age"})}};
  const json response = ok("/v1/responses", {{"model", "tiny"}, {"input", "A person as JSON"},
                                             {"text", {{"format", {{"type", "json_schema"}, {"name", "person"},
                                                                   {"schema", schema}, {"strict", true}}}}},
                                             {"max_output_tokens", 200}, {"temperature", 0}});
  ASSERT_EQ(response["status"], "completed") << response.dump();
  const json value = json::parse(output_text(response));
  EXPECT_TRUE(value["name"].is_string() && value["age"].is_number_integer()) << value.dump();
  EXPECT_EQ(response["text"]["format"]["name"], "person");  // echoed
}

TEST_F(ServerResponses, WhatTheServerCannotHonourIsRefusedNamingTheField) {
  const json base = {{"model", "tiny"}, {"input", "hi"}};
  auto with = [&](const json& fields) {
    json body = base;
    body.update(fields);
    return body;
  };
  expect_refused(with({{"previous_response_id", "resp_1"}}), "previous_response_id", "resp_1");  // never kept
  expect_refused(with({{"background", true}}), "background");
  expect_refused(with({{"tools", json::array({{{"type", "web_search"}}})}}), "tools[0].type");
  const json image = {{"type", "input_image"}, {"image_url", "x"}};
  expect_refused(with({{"input", json::array({{{"role", "user"}, {"content", json::array({image})}}})}}),
                 "input[0].content[0].type");
  expect_refused(with({{"input", json::array({{{"type", "item_reference"}, {"id", "msg_1"}}})}}), "input[0].type");
  // Fields of the wrong type inside an item (the fuzzer's case: a 500 once input items were listed).
  for (const json& item : {json{{"type", {{"text", 5}}}, {"name", "f"}}, json{{"role", json::array()}, {"content", "x"}},
                           json{{"type", "message"}, {"role", "user"}, {"content", "x"}, {"id", 7}}}) {
    auto r = post("/v1/responses", with({{"input", json::array({item})}}));
    ASSERT_TRUE(r);
    EXPECT_LT(r->status, 500) << item.dump() << " -> " << r->body;
  }
  expect_refused(with({{"max_output_tokens", 0}}), "max_output_tokens");
  expect_refused(with({{"text", {{"format", {{"type", "json_schema"}, {"name", "n"},
                                             {"schema", {{"type", "string"}, {"format", "hostname"}}}}}}}}),
                 "text.format.schema", "'format'");
  expect_refused(with({{"reasoning", {{"effort", "extreme"}}}}), "reasoning.effort");
  // Logprobs beside tools (a call's tokens are no output text), and more alternatives than 20.
  expect_refused(with({{"include", json::array({"reasoning.encrypted_content", "message.output_text.logprobs"})},
                       {"tools", kWeatherTools}}),
                 "include[1]", "tools");
  expect_refused(with({{"top_logprobs", 2}, {"tools", kWeatherTools}}), "top_logprobs", "tools");
  expect_refused(with({{"top_logprobs", 21}}), "top_logprobs");
  // What concerns items this server never writes, or encrypted reasoning it has none of, changes nothing.
  const json plain = ok("/v1/responses", with({{"max_output_tokens", 4}, {"temperature", 0}}));
  const json included = ok("/v1/responses", with({{"include", json::array({"reasoning.encrypted_content"})},
                                                  {"store", false}, {"max_output_tokens", 4}, {"temperature", 0}}));
  EXPECT_EQ(output_text(included), output_text(plain));
  EXPECT_EQ(included["usage"], plain["usage"]);
  expect_refused(json{{"model", "tiny"}}, "input");
  auto r = post("/v1/responses", with({{"model", "other"}}));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
}

// `value` as named_sse_events parses an event's data (keys unordered), to compare with one.
nlohmann::json unordered(const json& value) { return nlohmann::json::parse(value.dump()); }

// The output text's logprobs (include "message.output_text.logprobs", top_logprobs) are the chat
// route's for the same conversation, token for token with their alternatives; streamed, each
// output_text delta carries its tokens' entries, which concatenate to the whole part's, and the
// .done event repeats them all. The same server parses Qwen3's reasoning, so a reasoning block's
// tokens would be left out (unit test ContentTokens); this model's answers open none.
TEST_F(ServerResponses, OutputTextLogprobsAreTheChatRoutesForTheSameConversation) {
  const json messages = json::array({{{"role", "user"}, {"content", "Tell me a story"}}});
  const json chat = ok("/v1/chat/completions", {{"model", "tiny"}, {"messages", messages}, {"max_tokens", 12},
                                                {"temperature", 0}, {"logprobs", true}, {"top_logprobs", 3}});
  const json expected = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(expected.size(), chat["usage"]["completion_tokens"]) << chat.dump();
  ASSERT_EQ(expected[0]["top_logprobs"].size(), 3u);
  const json body = {{"model", "tiny"}, {"input", "Tell me a story"}, {"max_output_tokens", 12}, {"temperature", 0},
                     {"include", json::array({"message.output_text.logprobs"})}, {"top_logprobs", 3}};
  const json whole = ok("/v1/responses", body);
  ASSERT_EQ(output_text(whole), chat["choices"][0]["message"]["content"]) << whole.dump();
  const json& part = whole["output"].back()["content"][0];
  EXPECT_EQ(part["logprobs"], expected) << whole.dump();
  EXPECT_EQ(whole["top_logprobs"], 3);

  json streamed_body = body;
  streamed_body["stream"] = true;
  auto r = post("/v1/responses", streamed_body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  json concatenated = json::array();
  int deltas = 0;
  for (const NamedSseEvent& e : named_sse_events(r->body)) {
    if (e.name == "response.output_text.delta") {
      ++deltas;
      for (json entry : e.data["logprobs"]) concatenated.push_back(std::move(entry));
    }
    if (e.name == "response.output_text.done") {
      EXPECT_EQ(e.data["logprobs"], unordered(expected));
    }
  }
  EXPECT_GT(deltas, 1) << r->body;
  EXPECT_EQ(unordered(concatenated), unordered(expected));

  // Without alternatives (include alone), and without logprobs asked for: empty lists.
  json plain_body = body;
  plain_body.erase("top_logprobs");
  const json plain = ok("/v1/responses", plain_body);
  const json& entries = plain["output"].back()["content"][0]["logprobs"];
  ASSERT_EQ(entries.size(), expected.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    EXPECT_EQ(entries[i]["token"], expected[i]["token"]);
    EXPECT_EQ(entries[i]["logprob"], expected[i]["logprob"]);
    EXPECT_EQ(entries[i]["top_logprobs"], json::array());
  }
  plain_body.erase("include");
  EXPECT_EQ(ok("/v1/responses", plain_body)["output"].back()["content"][0]["logprobs"], json::array());
}

TEST_F(ServerResponses, PreviousResponseIdContinuesAKeptConversation) {
  const json first = ok("/v1/responses", {{"model", "tiny"}, {"instructions", "You are terse."},
                                          {"input", "Tell me a story"}, {"max_output_tokens", 8}, {"temperature", 0}});
  EXPECT_EQ(first["store"], true);
  // Continued by id: the same answer as the whole conversation sent again (the first response's
  // output as input items), and its instructions do not carry over.
  const json next = ok("/v1/responses", {{"model", "tiny"}, {"previous_response_id", first["id"]},
                                         {"input", "Go on"}, {"max_output_tokens", 8}, {"temperature", 0}});
  json items = json::array({{{"role", "user"}, {"content", "Tell me a story"}}});
  for (const json& item : first["output"]) items.push_back(item);
  items.push_back({{"role", "user"}, {"content", "Go on"}});
  const json resent = ok("/v1/responses", {{"model", "tiny"}, {"input", items}, {"max_output_tokens", 8},
                                           {"temperature", 0}, {"store", false}});
  EXPECT_EQ(next["previous_response_id"], first["id"]);
  EXPECT_EQ(output_text(next), output_text(resent));
  // The same usage but what the prefix cache served: the resent conversation is the prompt just run.
  json uncached = resent["usage"];
  uncached["input_tokens_details"]["cached_tokens"] = next["usage"]["input_tokens_details"]["cached_tokens"];
  EXPECT_EQ(next["usage"], uncached);
  const int64_t resent_tokens = resent["usage"]["input_tokens"].get<int64_t>();
  EXPECT_EQ(resent["usage"]["input_tokens_details"]["cached_tokens"], (resent_tokens - 1) / 16 * 16);
  EXPECT_EQ(resent["store"], false);
  // Kept: GET answers the response as it was; DELETE forgets it.
  auto got = server_->client().Get("/v1/responses/" + first["id"].get<std::string>());
  ASSERT_TRUE(got);
  ASSERT_EQ(got->status, 200) << got->body;
  EXPECT_EQ(json::parse(got->body), first);
  auto gone = server_->client().Delete("/v1/responses/" + first["id"].get<std::string>());
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 200) << gone->body;
  EXPECT_EQ(json::parse(gone->body)["deleted"], true);
  for (const std::string& id : {first["id"].get<std::string>(), resent["id"].get<std::string>()}) {
    auto missing = server_->client().Get("/v1/responses/" + id);
    ASSERT_TRUE(missing);
    EXPECT_EQ(missing->status, 404) << id << ": " << missing->body;
  }
  expect_refused({{"model", "tiny"}, {"previous_response_id", first["id"]}, {"input", "x"}}, "previous_response_id",
                 first["id"].get<std::string>());
}

// GET /v1/responses/{id}/input_items: the kept response's own input (not the conversation it
// continued), each item with an id (the given one kept), newest first by default, in pages.
TEST_F(ServerResponses, InputItemsListTheResponsesOwnInputInPages) {
  const json input = json::array({{{"role", "user"}, {"content", "Tell me a story"}},
                                  {{"type", "message"}, {"id", "msg_given"}, {"role", "assistant"},
                                   {"content", json::array({{{"type", "output_text"}, {"text", "Once"}}})}},
                                  {{"role", "user"}, {"content", "Go on"}}});
  const json first = ok("/v1/responses", {{"model", "tiny"}, {"input", input}, {"max_output_tokens", 4}});
  const std::string id = first["id"].get<std::string>();
  auto list = [&](const std::string& query) {
    auto r = server_->client().Get("/v1/responses/" + id + "/input_items" + query);
    EXPECT_TRUE(r && r->status == 200) << query << ": " << (r ? r->body : "no answer");
    return r && r->status == 200 ? json::parse(r->body) : json::object();
  };
  const json asc = list("?order=asc");
  ASSERT_EQ(asc["data"].size(), 3u) << asc.dump();
  EXPECT_EQ(asc["object"], "list");
  EXPECT_EQ(asc["has_more"], false);
  EXPECT_EQ(asc["data"][1]["id"], "msg_given");
  for (size_t i = 0; i < 3; ++i) {
    const json& item = asc["data"][i];
    EXPECT_EQ(item["type"], "message");
    EXPECT_EQ(item["role"], input[i]["role"]);
    EXPECT_TRUE(item["id"].is_string() && !item["id"].get<std::string>().empty());
  }
  EXPECT_EQ(asc["data"][0]["content"], json::parse(R"([{"type":"input_text","text":"Tell me a story"}])"));
  EXPECT_EQ(asc["first_id"], asc["data"][0]["id"]);
  EXPECT_EQ(asc["last_id"], asc["data"][2]["id"]);
  const json desc = list("");
  ASSERT_EQ(desc["data"].size(), 3u);
  EXPECT_EQ(desc["data"][0], asc["data"][2]) << "newest first by default";
  // Pages of one: after each last_id the next, has_more until the end.
  json page = list("?order=asc&limit=1");
  std::vector<json> paged;
  for (int guard = 0; guard < 5; ++guard) {
    ASSERT_EQ(page["data"].size(), 1u) << page.dump();
    paged.push_back(page["data"][0]);
    if (!page["has_more"].get<bool>()) break;
    page = list("?order=asc&limit=1&after=" + page["last_id"].get<std::string>());
  }
  EXPECT_EQ(json(paged), asc["data"]);
  // A continued response lists its own input only; the list stays as it was listed before.
  const json next = ok("/v1/responses", {{"model", "tiny"}, {"previous_response_id", id}, {"input", "And then?"},
                                         {"max_output_tokens", 4}});
  auto r = server_->client().Get("/v1/responses/" + next["id"].get<std::string>() + "/input_items");
  ASSERT_TRUE(r && r->status == 200);
  const json own = json::parse(r->body);
  ASSERT_EQ(own["data"].size(), 1u) << own.dump();
  EXPECT_EQ(own["data"][0]["content"][0]["text"], "And then?");
  EXPECT_EQ(list("?order=asc"), asc);
  // Refusals name the parameter; an id not kept is a 404.
  for (const auto& [query, param] : std::vector<std::pair<std::string, std::string>>{
           {"?limit=0", "limit"}, {"?limit=101", "limit"}, {"?limit=x", "limit"}, {"?order=up", "order"},
           {"?after=msg_nobody", "after"}}) {
    auto bad = server_->client().Get("/v1/responses/" + id + "/input_items" + query);
    ASSERT_TRUE(bad);
    EXPECT_EQ(bad->status, 400) << query << ": " << bad->body;
    EXPECT_EQ(json::parse(bad->body)["error"]["param"], param) << query;
  }
  auto missing = server_->client().Get("/v1/responses/resp_nobody/input_items");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST(ResponsesStore, KeepsAtMostItsCapacityDroppingTheLeastRecentlyUsed) {
  constexpr size_t kOverhead = ResponsesStore::kEntryOverhead;
  ResponsesStore store(100 + 2 * kOverhead);
  // An entry of `bytes` counted bytes (its texts and the fixed overhead per entry).
  const auto entry = [](size_t bytes) {
    bytes -= kOverhead;
    return ResponsesStore::Entry{std::string(bytes / 2, 'r'), std::string(bytes - bytes / 2, 'i')};
  };
  store.put("a", entry(kOverhead + 40));
  store.put("b", entry(kOverhead + 40));
  ASSERT_TRUE(store.get("a"));  // a is now the most recently used
  store.put("c", entry(kOverhead + 40));  // drops b
  EXPECT_TRUE(store.get("a") && store.get("c"));
  EXPECT_FALSE(store.get("b"));
  EXPECT_EQ(store.bytes(), 2 * kOverhead + 80);
  store.put("a", entry(kOverhead + 10));  // replaced, not added
  EXPECT_EQ(store.bytes(), 2 * kOverhead + 50);
  store.put("huge", entry(2 * kOverhead + 101));  // larger than the whole store: not kept, nothing dropped
  EXPECT_FALSE(store.get("huge"));
  EXPECT_EQ(store.size(), 2u);
  EXPECT_TRUE(store.remove("c"));
  EXPECT_FALSE(store.remove("c"));
  for (int i = 0; i < 1000; ++i) {  // many small ones: their overhead bounds how many are kept
    store.put("k" + std::to_string(i), entry(kOverhead + static_cast<size_t>(i % 37)));
    ASSERT_LE(store.bytes(), 100 + 2 * kOverhead);
    ASSERT_LE(store.size(), 2u);
  }
}

TEST_F(ServerResponses, AnAnswerTheEngineGaveUpOnIsAnError) {
  const json schema = json::parse(ambiguous_schema().dump());
  json body = {{"model", "tiny"}, {"input", "hi"}, {"max_output_tokens", 64}, {"temperature", 0},
               {"reasoning", {{"effort", "minimal"}}},
               {"tools", json::array({{{"type", "function"}, {"name", "f"}, {"parameters", schema}}})},
               {"tool_choice", {{"type", "function"}, {"name", "f"}}}};
  auto whole = post("/v1/responses", body);
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->status, 400) << whole->body;
  const std::string why = json::parse(whole->body)["error"]["message"];
  EXPECT_NE(why.find("too ambiguous"), std::string::npos) << why;
  body["stream"] = true;
  auto streamed = post("/v1/responses", body);
  ASSERT_TRUE(streamed);
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  const std::vector<NamedSseEvent> events = named_sse_events(streamed->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.front().name, "response.created");
  EXPECT_EQ(events.back().name, "error") << streamed->body;
  EXPECT_EQ(events.back().data["message"], why);
}

}  // namespace
}  // namespace tachyon::server::testing::responses_test
