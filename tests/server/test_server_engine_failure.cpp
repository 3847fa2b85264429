// A runner that fails under a served request (TACHYON_RUNNER_FAULT, engine/runner_fault.h) does
// not take the server down: the request in flight ends with the OpenAI error object (a streamed
// one with an error event and no [DONE]; a non-streamed one with status 500 and the error as its
// body, on every generation route), /health answers 503 with the reason, new requests get 503
// naming it, /metrics shows tachyon:engine_failed 1, and the server still answers. For the
// synchronous loop (the fault in the step's launch) and asynchronous scheduling (in the wait that
// collects the step in flight). The exit of `tachyon serve` after such a failure:
// tests/server/engine_failure.py.
#include <nlohmann/json.hpp>

#include <cstdlib>

#include "server_fixture.h"

namespace tachyon::server::testing {
namespace {

constexpr const char* kFaultText = "a runner fault injected by a test at ";

struct FaultCase {
  const char* name;
  const char* fault;  // the runner's fourth call throws: after the prompt and two decode steps
  core::AsyncScheduling async;
};
void PrintTo(const FaultCase& c, std::ostream* os) { *os << c.name; }

class ServerEngineFailure : public ::testing::TestWithParam<FaultCase> {
 protected:
  void SetUp() override {
    core::EngineConfig engine = ServerUnderTest::default_engine();
    engine.device.async_scheduling = GetParam().async;
    ::setenv("TACHYON_RUNNER_FAULT", GetParam().fault, 1);  // read once, when the server starts
    server_ = std::make_unique<ServerUnderTest>(engine);
    ::unsetenv("TACHYON_RUNNER_FAULT");
  }
  std::string expected() const {
    const std::string fault = GetParam().fault;
    return kFaultText + fault.substr(0, fault.find(':')) + " " + fault.substr(fault.find(':') + 1);
  }
  // After the failure: /health 503 with the reason, a new request 503 naming it, the gauge at 1.
  void expect_failed_server() {
    auto c = server_->client();
    auto health = c.Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 503);
    const auto health_body = nlohmann::json::parse(health->body);
    EXPECT_NE(health_body["error"]["message"].get<std::string>().find(expected()), std::string::npos) << health->body;
    EXPECT_EQ(health_body["error"]["code"], "engine_failed");
    for (bool stream : {false, true}) {
      auto again = c.Post("/v1/completions",
                          std::string(R"({"prompt":"hello","max_tokens":4,"stream":)") + (stream ? "true" : "false") + "}",
                          "application/json");
      ASSERT_TRUE(again);
      EXPECT_EQ(again->status, 503) << again->body;
      const auto body = nlohmann::json::parse(again->body);
      EXPECT_NE(body["error"]["message"].get<std::string>().find(expected()), std::string::npos) << again->body;
      EXPECT_EQ(body["error"]["code"], "engine_failed");
    }
    auto messages = c.Post("/v1/messages", R"({"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"hi"}]})",
                           "application/json");
    ASSERT_TRUE(messages);
    EXPECT_EQ(messages->status, 503) << messages->body;
    auto metrics = c.Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_NE(metrics->body.find("\ntachyon:engine_failed{model_name=\"tiny\"} 1\n"), std::string::npos);
    auto models = c.Get("/v1/models");  // still serving what needs no engine
    ASSERT_TRUE(models);
    EXPECT_EQ(models->status, 200);
  }

  std::unique_ptr<ServerUnderTest> server_;
};

TEST_P(ServerEngineFailure, NonStreamedRequestGetsTheErrorObject) {
  auto c = server_->client();
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_NE(c.Get("/metrics")->body.find("\ntachyon:engine_failed{model_name=\"tiny\"} 0\n"), std::string::npos);
  auto res = c.Post("/v1/completions", R"({"prompt":"Tell me a story","max_tokens":32,"ignore_eos":true})",
                    "application/json");
  ASSERT_TRUE(res) << "the connection was cut";
  // A non-streamed answer's head waits for its status (docs/api.md, "Lifecycle"): never a 200 here.
  EXPECT_EQ(res->status, 500) << res->body;
  const auto body = nlohmann::json::parse(res->body);
  ASSERT_TRUE(body.contains("error")) << res->body;
  EXPECT_NE(body["error"]["message"].get<std::string>().find("the engine failed: " + expected()), std::string::npos)
      << res->body;
  EXPECT_EQ(body["error"]["type"], "internal_server_error");
  EXPECT_EQ(body["error"]["code"], "engine_failed");
  expect_failed_server();
}

TEST_P(ServerEngineFailure, StreamedRequestEndsWithAnErrorEventAndNoDone) {
  auto c = server_->client();
  auto res = c.Post("/v1/chat/completions",
                    R"({"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":32,"ignore_eos":true,"stream":true})",
                    "application/json");
  ASSERT_TRUE(res) << "the connection was cut";
  EXPECT_EQ(res->status, 200);
  const std::vector<std::string> payloads = sse_payloads(res->body);
  ASSERT_FALSE(payloads.empty()) << res->body;
  EXPECT_EQ(std::find(payloads.begin(), payloads.end(), "[DONE]"), payloads.end()) << "a failed stream must not look complete";
  const auto last = nlohmann::json::parse(payloads.back());
  ASSERT_TRUE(last.contains("error")) << res->body;
  EXPECT_NE(last["error"]["message"].get<std::string>().find("the engine failed: " + expected()), std::string::npos)
      << res->body;
  EXPECT_EQ(last["error"]["code"], "engine_failed");
  expect_failed_server();
}

// Every non-streamed generation route: the chat route and the Anthropic route answer a request
// the engine failed under with 500 and their own error shape, as /v1/completions does above.
struct RouteCase {
  const char* name;
  const char* path;
  const char* body;
  bool anthropic;  // the error in Anthropic's shape: {"type":"error","error":{"type":"api_error",...}}
};
void PrintTo(const RouteCase& c, std::ostream* os) { *os << c.name; }

class ServerEngineFailureRoute : public ::testing::TestWithParam<RouteCase> {};

TEST_P(ServerEngineFailureRoute, NonStreamedRequestGets500) {
  ::setenv("TACHYON_RUNNER_FAULT", "launch:2", 1);  // after the prompt's step: the answer has begun
  ServerUnderTest server;
  ::unsetenv("TACHYON_RUNNER_FAULT");
  auto res = server.client().Post(GetParam().path, GetParam().body, "application/json");
  ASSERT_TRUE(res) << "the connection was cut";
  EXPECT_EQ(res->status, 500) << res->body;
  const auto body = nlohmann::json::parse(res->body);
  ASSERT_TRUE(body.contains("error")) << res->body;
  EXPECT_NE(body["error"]["message"].get<std::string>().find("a runner fault injected by a test at launch 2"),
            std::string::npos)
      << res->body;
  if (GetParam().anthropic) {
    EXPECT_EQ(body["type"], "error");
    EXPECT_EQ(body["error"]["type"], "api_error");
  } else {
    EXPECT_EQ(body["error"]["type"], "internal_server_error");
    EXPECT_EQ(body["error"]["code"], "engine_failed");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Routes, ServerEngineFailureRoute,
    ::testing::Values(
        RouteCase{"Chat", "/v1/chat/completions",
                  R"({"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":32,"ignore_eos":true})", false},
        RouteCase{"Messages", "/v1/messages",
                  R"({"model":"tiny","max_tokens":32,"messages":[{"role":"user","content":"Tell me a story"}]})",
                  true}),
    [](const ::testing::TestParamInfo<RouteCase>& info) { return info.param.name; });

INSTANTIATE_TEST_SUITE_P(Faults, ServerEngineFailure,
                         ::testing::Values(FaultCase{"Sync", "launch:4", core::AsyncScheduling::kOff},
                                           FaultCase{"AsyncWait", "wait:4", core::AsyncScheduling::kOn}),
                         [](const ::testing::TestParamInfo<FaultCase>& info) { return info.param.name; });

}  // namespace
}  // namespace tachyon::server::testing
