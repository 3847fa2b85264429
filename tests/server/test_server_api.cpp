// Every endpoint over real HTTP, streamed and not, and every bad input of the issue: each gets
// a clear 4xx with an OpenAI error object, and a normal request right after still succeeds.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>

#include "server_fixture.h"

namespace tachyon::server::testing {
namespace {

using nlohmann::json;

class ServerApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerUnderTest(); }
  static void TearDownTestSuite() { delete server_; }
  static httplib::Result post(const std::string& path, const std::string& body) {
    return server_->client().Post(path, body, "application/json");
  }
  static void expect_good_request_works() {
    auto r = post("/v1/completions", R"({"prompt":"Hello","max_tokens":3,"temperature":0})");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  static ServerUnderTest* server_;
};
ServerUnderTest* ServerApi::server_ = nullptr;

TEST_F(ServerApi, CompletionStreamedEqualsWhole) {
  auto whole = post("/v1/completions", R"({"prompt":"The capital of France","max_tokens":12,"temperature":0,"ignore_eos":true})");
  ASSERT_EQ(whole->status, 200) << whole->body;
  json body = json::parse(whole->body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "tiny");
  EXPECT_EQ(body["usage"]["completion_tokens"], 12);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  auto streamed = post("/v1/completions",
                       R"({"prompt":"The capital of France","max_tokens":12,"temperature":0,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_EQ(streamed->status, 200);
  EXPECT_NE(streamed->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  auto frames = sse_payloads(streamed->body);
  ASSERT_GE(frames.size(), 3u);
  EXPECT_EQ(frames.back(), "[DONE]");
  std::string text;
  int finish_reasons = 0;
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    json chunk = json::parse(frames[i]);
    if (chunk["choices"].empty()) {  // the usage chunk, last before [DONE]
      EXPECT_EQ(i, frames.size() - 2);
      EXPECT_EQ(chunk["usage"]["completion_tokens"], 12);
      continue;
    }
    text += chunk["choices"][0]["text"].get<std::string>();
    finish_reasons += !chunk["choices"][0]["finish_reason"].is_null();
  }
  EXPECT_EQ(finish_reasons, 1);
  EXPECT_EQ(text, body["choices"][0]["text"].get<std::string>());
}

TEST_F(ServerApi, ChatStreamedEqualsWholeAndStartsWithTheRole) {
  const std::string request = R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"}]}],"max_completion_tokens":10,"temperature":0)";
  auto whole = post("/v1/chat/completions", request + "}");
  ASSERT_EQ(whole->status, 200) << whole->body;
  json body = json::parse(whole->body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  auto streamed = post("/v1/chat/completions", request + R"(,"stream":true})");
  auto frames = sse_payloads(streamed->body);
  ASSERT_GE(frames.size(), 2u);
  EXPECT_EQ(json::parse(frames[0])["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (size_t i = 0; i + 1 < frames.size(); ++i) {
    const json chunk = json::parse(frames[i]);
    const json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("content") && delta["content"].is_string()) text += delta["content"].get<std::string>();
  }
  EXPECT_EQ(text, body["choices"][0]["message"]["content"].get<std::string>());
}

// A choice the engine ends by itself (its grammar's parses double with every token, past the
// parser's budget) ends with finish_reason "abort" and says why in "abort_reason", on its last
// chunk when streamed; a choice that ends otherwise has no such key.
TEST_F(ServerApi, ChoiceTheEngineEndedSaysWhy) {
  const std::string grammar = R"("guided_grammar":"root ::= \"a\" root \"b\" | \"a\" root \"c\"")";
  for (const bool chat : {false, true}) {
    const std::string path = chat ? "/v1/chat/completions" : "/v1/completions";
    const std::string body = std::string(chat ? R"({"messages":[{"role":"user","content":"hi"}],)"
                                                R"("chat_template_kwargs":{"enable_thinking":false},)"
                                              : R"({"prompt":"hi",)") +
                             R"("max_tokens":16,"temperature":0,)" + grammar;
    auto whole = post(path, body + "}");
    ASSERT_EQ(whole->status, 200) << whole->body;
    const json choice = json::parse(whole->body)["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "abort") << choice.dump();
    EXPECT_NE(choice.value("abort_reason", "").find("too ambiguous"), std::string::npos) << choice.dump();
    auto streamed = post(path, body + R"(,"stream":true})");
    ASSERT_EQ(streamed->status, 200) << streamed->body;
    const std::vector<std::string> frames = sse_payloads(streamed->body);
    ASSERT_FALSE(frames.empty());
    EXPECT_EQ(frames.back(), "[DONE]");
    int finished = 0;
    for (size_t i = 0; i + 1 < frames.size(); ++i) {
      const json c = json::parse(frames[i])["choices"][0];
      if (c["finish_reason"].is_null()) {
        EXPECT_FALSE(c.contains("abort_reason")) << frames[i];
        continue;
      }
      ++finished;
      EXPECT_EQ(c["finish_reason"], "abort");
      EXPECT_EQ(c.value("abort_reason", ""), choice["abort_reason"]) << frames[i];
    }
    EXPECT_EQ(finished, 1) << path;
  }
  auto plain = post("/v1/completions", R"({"prompt":"Hello","max_tokens":3,"temperature":0})");
  ASSERT_EQ(plain->status, 200) << plain->body;
  EXPECT_FALSE(json::parse(plain->body)["choices"][0].contains("abort_reason")) << plain->body;
}

TEST_F(ServerApi, PromptShapesNAndLogprobs) {
  auto r = post("/v1/completions", R"({"prompt":[[1,2,3],[4,5]],"max_tokens":2,"n":2,"logprobs":3,"seed":7})");
  ASSERT_EQ(r->status, 200) << r->body;
  json body = json::parse(r->body);
  ASSERT_EQ(body["choices"].size(), 4u);
  for (const json& c : body["choices"]) EXPECT_EQ(c["logprobs"]["tokens"].size(), 2u);
  auto chat = post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"max_tokens":2,"logprobs":true,"top_logprobs":2})");
  ASSERT_EQ(chat->status, 200) << chat->body;
  EXPECT_EQ(json::parse(chat->body)["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
}

// Usage tells the prompt tokens the prefix cache served apart, on every generating route: none
// for a prompt never seen (its first 16 tokens hold a fresh word), then, for the same prompt
// again, every full block of it but the one holding its last token (the engine computes at least
// one token: (P - 1) / 16 blocks of 16). OpenAI's shapes count them among the prompt tokens
// (chat and completions: prompt_tokens_details.cached_tokens, in the streamed usage chunk too;
// Responses: input_tokens_details.cached_tokens); Anthropic's leaves them out of input_tokens and
// counts them as cache_read_input_tokens, in the whole message and in the stream's message_delta.
TEST_F(ServerApi, UsageCountsThePromptTokensTheCacheServed) {
  int round = 0;
  // A prompt of about 60 tokens, new to the server: its first words name the route and a nonce.
  auto fresh_text = [&](const std::string& route) {
    std::string text = route + " cache probe " + std::to_string(::getpid()) + "-" + std::to_string(++round) + ":";
    for (int i = 0; i < 40; ++i) text += " word" + std::to_string(i);
    return text;
  };
  auto expected_hit = [](int64_t prompt_tokens) { return (prompt_tokens - 1) / 16 * 16; };
  auto twice = [&](const std::string& path, const json& body) {
    std::vector<json> answers;
    for (int i = 0; i < 2; ++i) {
      auto r = post(path, body.dump());
      EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
      answers.push_back(r && r->status == 200 ? json::parse(r->body) : json::object());
    }
    return answers;
  };

  const std::string completion_prompt = fresh_text("completions");
  for (const auto& [path, body] : std::vector<std::pair<std::string, json>>{
           {"/v1/completions", {{"prompt", completion_prompt}, {"max_tokens", 2}, {"temperature", 0}}},
           {"/v1/chat/completions",
            {{"messages", json::array({{{"role", "user"}, {"content", fresh_text("chat")}}})},
             {"max_tokens", 2},
             {"temperature", 0}}}}) {
    const std::vector<json> answers = twice(path, body);
    const json& usage = answers[1]["usage"];
    EXPECT_GE(usage["prompt_tokens"].get<int64_t>(), 48) << path;
    EXPECT_EQ(answers[0]["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << path;
    EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], expected_hit(usage["prompt_tokens"])) << path;
    EXPECT_EQ(usage["prompt_tokens"], answers[0]["usage"]["prompt_tokens"]) << path;
  }
  // The streamed usage chunk of a third run of the completion prompt.
  json streamed = {{"prompt", completion_prompt}, {"max_tokens", 2}, {"temperature", 0}, {"stream", true},
                   {"stream_options", {{"include_usage", true}}}};
  auto s = post("/v1/completions", streamed.dump());
  ASSERT_TRUE(s && s->status == 200);
  const std::vector<std::string> frames = sse_payloads(s->body);
  ASSERT_GE(frames.size(), 2u);
  const json usage_chunk = json::parse(frames[frames.size() - 2]);
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"],
            expected_hit(usage_chunk["usage"]["prompt_tokens"]));

  const json response_body = {{"model", "tiny"}, {"input", fresh_text("responses")}, {"max_output_tokens", 2},
                              {"temperature", 0}, {"store", false}};
  const std::vector<json> responses = twice("/v1/responses", response_body);
  EXPECT_EQ(responses[0]["usage"]["input_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(responses[1]["usage"]["input_tokens_details"]["cached_tokens"],
            expected_hit(responses[1]["usage"]["input_tokens"]));

  json message_body = {{"model", "tiny"}, {"max_tokens", 2}, {"temperature", 0},
                       {"messages", json::array({{{"role", "user"}, {"content", fresh_text("messages")}}})}};
  const std::vector<json> messages = twice("/v1/messages", message_body);
  const json& first = messages[0]["usage"];
  const json& second = messages[1]["usage"];
  const int64_t prompt = first["input_tokens"].get<int64_t>();
  EXPECT_EQ(first["cache_read_input_tokens"], 0);
  EXPECT_EQ(first["cache_creation_input_tokens"], 0);
  EXPECT_EQ(second["cache_read_input_tokens"], expected_hit(prompt));
  EXPECT_EQ(second["input_tokens"], prompt - expected_hit(prompt)) << "Anthropic's input_tokens leave cache reads out";
  message_body["stream"] = true;
  auto m = post("/v1/messages", message_body.dump());
  ASSERT_TRUE(m && m->status == 200);
  const std::vector<NamedSseEvent> events = named_sse_events(m->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front().data["message"]["usage"]["input_tokens"], prompt) << "message_start: before the lookup";
  const NamedSseEvent& delta = events[events.size() - 2];
  ASSERT_EQ(delta.name, "message_delta");
  EXPECT_EQ(delta.data["usage"]["cache_read_input_tokens"], expected_hit(prompt));
  EXPECT_EQ(delta.data["usage"]["input_tokens"], second["input_tokens"]);
}

// usage.completion_tokens_details.reasoning_tokens on the chat route (whole and the streamed usage
// chunk) and output_tokens_details.reasoning_tokens on the Responses API, for the tiny Qwen3 model
// (reasoning parser qwen3). Its random weights never write </think>: with the answer prefilled
// into an open block (continue_final_message) every token is reasoning; a plain answer opens none
// (0); a route that parses no reasoning (completions) leaves the field out.
TEST_F(ServerApi, UsageCountsTheReasoningsTokens) {
  const json thinking = {{"messages", json::array({{{"role", "user"}, {"content", "What is 2 + 2?"}},
                                                   {{"role", "assistant"}, {"content", "<think>\n"}}})},
                         {"continue_final_message", true},
                         {"add_generation_prompt", false},
                         {"max_tokens", 6},
                         {"temperature", 0},
                         {"ignore_eos", true}};
  auto r = post("/v1/chat/completions", thinking.dump());
  ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  const json answer = json::parse(r->body);
  EXPECT_EQ(answer["usage"]["completion_tokens"], 6);
  EXPECT_EQ(answer["usage"]["completion_tokens_details"]["reasoning_tokens"], 6) << answer.dump();
  EXPECT_FALSE(answer["choices"][0]["message"]["reasoning_content"].get<std::string>().empty()) << answer.dump();
  json streamed = thinking;
  streamed["stream"] = true;
  streamed["stream_options"] = {{"include_usage", true}};
  auto s = post("/v1/chat/completions", streamed.dump());
  ASSERT_TRUE(s && s->status == 200);
  const std::vector<std::string> frames = sse_payloads(s->body);
  ASSERT_GE(frames.size(), 2u);
  EXPECT_EQ(json::parse(frames[frames.size() - 2])["usage"]["completion_tokens_details"]["reasoning_tokens"], 6);

  const json plain = {{"messages", json::array({{{"role", "user"}, {"content", "What is 2 + 2?"}}})},
                      {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true},
                      {"chat_template_kwargs", {{"enable_thinking", false}}}};
  auto p = post("/v1/chat/completions", plain.dump());
  ASSERT_TRUE(p && p->status == 200);
  EXPECT_EQ(json::parse(p->body)["usage"]["completion_tokens_details"]["reasoning_tokens"], 0) << p->body;
  auto c = post("/v1/completions", R"({"prompt":"2 + 2 =","max_tokens":2,"temperature":0})");
  ASSERT_TRUE(c && c->status == 200);
  EXPECT_FALSE(json::parse(c->body)["usage"].contains("completion_tokens_details")) << c->body;
  const json response = {{"model", "tiny"}, {"input", "What is 2 + 2?"}, {"max_output_tokens", 4}, {"temperature", 0},
                         {"store", false}, {"chat_template_kwargs", {{"enable_thinking", false}}}};
  auto q = post("/v1/responses", response.dump());
  ASSERT_TRUE(q && q->status == 200) << (q ? q->body : "no answer");
  EXPECT_EQ(json::parse(q->body)["usage"]["output_tokens_details"]["reasoning_tokens"], 0) << q->body;
}

// /tokenize renders messages as the chat route does: with the tools offered and the template's
// kwargs, so its count is the prompt the chat route runs.
TEST_F(ServerApi, TokenizeRendersToolsAndTemplateKwargsAsTheChatRouteDoes) {
  const json messages = json::array({{{"role", "user"}, {"content", "What is the weather?"}}});
  const json tools = json::array({{{"type", "function"},
                                   {"function",
                                    {{"name", "get_weather"},
                                     {"description", "Current weather"},
                                     {"parameters", {{"type", "object"}, {"properties", json::object()}}}}}}});
  auto count = [&](const json& extra) {
    json body = {{"messages", messages}};
    body.update(extra);
    auto r = post("/tokenize", body.dump());
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body)["count"].get<int64_t>();
  };
  auto chat_prompt_tokens = [&](const json& extra) {
    json body = {{"messages", messages}, {"max_tokens", 1}};
    body.update(extra);
    auto r = post("/v1/chat/completions", body.dump());
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body)["usage"]["prompt_tokens"].get<int64_t>();
  };
  const json with_tools = {{"tools", tools}};
  const json no_thinking = {{"chat_template_kwargs", {{"enable_thinking", false}}}};
  EXPECT_GT(count(with_tools), count(json::object())) << "the tools are part of the rendered prompt";
  EXPECT_EQ(count(with_tools), chat_prompt_tokens(with_tools));
  EXPECT_NE(count(no_thinking), count(json::object())) << "the template's kwargs reach it";
  EXPECT_EQ(count(no_thinking), chat_prompt_tokens(no_thinking));
}

TEST_F(ServerApi, InfoEndpoints) {
  auto c = server_->client();
  auto models = c.Get("/v1/models");
  ASSERT_EQ(models->status, 200);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny");
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_EQ(json::parse(c.Get("/version")->body).contains("version"), true);
  auto tokenized = post("/tokenize", R"({"prompt":"Hello world"})");
  ASSERT_EQ(tokenized->status, 200) << tokenized->body;
  json t = json::parse(tokenized->body);
  EXPECT_EQ(t["count"], t["tokens"].size());
  auto detokenized = post("/detokenize", json{{"tokens", t["tokens"]}}.dump());
  EXPECT_EQ(json::parse(detokenized->body)["prompt"], "Hello world");
  // Requests of its own (ctest runs each case in a fresh process), then every latency
  // histogram and the step histogram must have been fed.
  post("/v1/completions", R"({"prompt":"count","max_tokens":6,"ignore_eos":true})");
  post("/v1/completions", R"({"prompt":"count","max_tokens":6,"ignore_eos":true,"stream":true})");
  ASSERT_TRUE(server_->wait_idle());
  auto metrics = c.Get("/metrics");
  ASSERT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("tachyon:num_requests_running"), std::string::npos);
  for (const char* series : {"time_to_first_token_seconds", "request_queue_time_seconds", "request_prefill_time_seconds",
                             "request_decode_time_seconds", "e2e_request_latency_seconds", "iteration_tokens",
                             "inter_token_latency_seconds", "request_time_per_output_token_seconds"}) {
    std::string count_line = std::string("tachyon:") + series + "_count{model_name=\"tiny\"} ";
    size_t at = metrics->body.find(count_line);
    ASSERT_NE(at, std::string::npos) << series;
    EXPECT_GT(std::stod(metrics->body.substr(at + count_line.size())), 0) << series;
  }
  EXPECT_NE(metrics->body.find("finished_reason=\"length\"} "), std::string::npos);
}

TEST(ServerMetricsPerRequest, SeriesLiveOnlyWhileTheRequestRuns) {
  ::setenv("TACHYON_METRICS_PER_REQUEST", "1", 1);
  ServerUnderTest server;
  ::unsetenv("TACHYON_METRICS_PER_REQUEST");
  std::atomic<bool> seen{false};
  std::thread stream([&] {
    auto c = server.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"prompt":"x","max_tokens":200,"ignore_eos":true,"stream":true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      if (!seen && server.client().Get("/metrics")->body.find("tachyon:request_context_tokens{") != std::string::npos) {
        seen = true;
      }
      return true;
    };
    httplib::Response res;
    httplib::Error error;
    c.send(req, res, error);
  });
  stream.join();
  EXPECT_TRUE(seen);
  ASSERT_TRUE(server.wait_idle());
  // The series goes when the server lets go of the request, just after the last byte is sent.
  bool gone = false;
  for (int i = 0; i < 200 && !gone; ++i) {
    gone = server.client().Get("/metrics")->body.find("tachyon:request_context_tokens{") == std::string::npos;
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone);
}

struct BadInput {
  const char* path;
  const char* body;
  int status;
  const char* message_part;  // part of the error message the user reads
};

TEST_F(ServerApi, BadInputsGetClearErrorsAndTheServerKeepsServing) {
  const BadInput cases[] = {
      {"/v1/completions", "{not json", 400, "not valid JSON"},
      {"/v1/completions", "[1,2]", 400, "object"},
      {"/v1/completions", R"({"max_tokens":3})", 400, "prompt"},
      {"/v1/completions", R"({"prompt":""})", 400, "prompt"},
      {"/v1/completions", R"({"prompt":42})", 400, "prompt"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":0})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":-5})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":100000})", 400, "context length"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":"ten"})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt":"x","temperature":-1})", 400, "temperature"},
      {"/v1/completions", R"({"prompt":"x","top_p":0})", 400, "top_p"},
      {"/v1/completions", R"({"prompt":"x","top_p":1.5})", 400, "top_p"},
      {"/v1/completions", R"({"prompt":"x","top_k":-2})", 400, "top_k"},
      {"/v1/completions", R"({"prompt":"x","n":0})", 400, "n"},
      {"/v1/completions", R"({"prompt":"x","n":1000})", 400, "n"},
      {"/v1/completions", R"({"prompt":"x","stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})", 400, "stop"},
      {"/v1/completions", R"({"prompt":"x","logprobs":50})", 400, "logprobs"},
      {"/v1/completions", R"({"prompt":[1,999999]})", 400, "between 0 and"},
      {"/v1/completions", R"({"prompt":"x","stream_options":{"include_usage":true}})", 400, "stream"},
      {"/v1/completions", R"({"prompt":"x","model":"other-model"})", 404, "other-model"},
      {"/v1/chat/completions", R"({"messages":[]})", 400, "messages"},
      {"/v1/chat/completions", R"({"max_tokens":2})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages":[{"role":"wizard","content":"x"}]})", 400, "role"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"number","multipleOf":2}}}})", 400, "'multipleOf'"},
      {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", 400, "UTF-8"},
      // The template's own check, and min_tokens past the room the prompt leaves (max_tokens not
      // given): both once carried a developer's " (check `...` failed at file:line)".
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"messages":5}})",
       400, "chat template refused"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"min_tokens":511})", 400,
       "'min_tokens' is 511, more than the"},
  };
  for (const BadInput& c : cases) {
    auto r = post(c.path, c.body);
    ASSERT_TRUE(r) << c.body;
    EXPECT_EQ(r->status, c.status) << c.body << " -> " << r->body;
    json error = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(error.is_object() && error.contains("error")) << r->body;
    EXPECT_TRUE(error["error"].contains("type") && error["error"].contains("param") && error["error"].contains("code"));
    std::string message = error["error"]["message"].get<std::string>();
    std::string lower = message;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    std::string want = c.message_part;
    for (char& ch : want) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    EXPECT_NE(lower.find(want), std::string::npos) << c.body << " -> " << message;
    EXPECT_EQ(message.find("(check `"), std::string::npos) << c.body << " -> " << message;
    expect_good_request_works();
  }
  // A prompt longer than the context, in tokens.
  std::string long_prompt(4000, 'a');
  for (size_t i = 0; i < long_prompt.size(); i += 2) long_prompt[i] = ' ';
  auto r = post("/v1/completions", json{{"prompt", long_prompt}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(r->status, 400) << r->body;
  expect_good_request_works();
  EXPECT_TRUE(server_->wait_idle());
}

TEST(ServerLimits, BodyTooLargeAndApiKey) {
  HttpOptions http;
  http.max_body_bytes = 4096;
  http.api_key = "sekret";
  ServerUnderTest server(ServerUnderTest::default_engine(), http);
  auto c = server.client();
  httplib::Headers auth = {{"Authorization", "Bearer sekret"}};
  auto no_key = c.Post("/v1/completions", R"({"prompt":"x","max_tokens":1})", "application/json");
  EXPECT_EQ(no_key->status, 401);
  EXPECT_NE(no_key->body.find("API key"), std::string::npos);
  auto big = c.Post("/v1/completions", auth, std::string(10000, ' ') + "{}", "application/json");
  EXPECT_EQ(big->status, 413);
  EXPECT_NE(big->body.find("too large"), std::string::npos);
  auto ok = c.Post("/v1/completions", auth, R"({"prompt":"x","max_tokens":1})", "application/json");
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(c.Get("/health")->status, 200);  // probes need no key
}

}  // namespace
}  // namespace tachyon::server::testing
