// The abuse suite, HTTP part: what the server promises clients that misbehave, by accident or on
// purpose. Every documented limit holds and answers with an OpenAI error body (400, 404, 405 with
// Allow, 408, 413, 431, 429 and 503 with Retry-After, max_connections); 100,000-deep nesting is a
// 400, not a crash; HTTP/1.x works as clients use it (pipelining, keep-alive without a cap,
// HTTP/1.0 without chunking). Everything goes over raw sockets (raw_http.h): a client library
// would refuse to send most of it. The fuzzers are in test_server_abuse_fuzz.cpp, the lock-out
// case in test_server_abuse_connections.cpp; TACHYON_ABUSE_FULL=1 runs their long versions.
//   ctest -R server_abuse      build/tests/server_server_abuse
#include "abuse_common.h"

namespace tachyon::server::testing {
namespace {

TEST_F(ServerAbuseHttp, MalformedFramingGets400WithAnErrorBody) {
  const std::string cases[] = {
      "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nNo colon here\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n",
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
      std::string("G\0T /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 41),
      "GET /health HTTP/1.1 extra\r\nHost: 127.0.0.1\r\n\r\n",
  };
  for (const std::string& request : cases) {
    RawResponse r;
    ASSERT_EQ(exchange(port(), request, r, 5s), ReadResult::kResponse) << printable(request);
    EXPECT_EQ(r.status, 400) << printable(request);
    EXPECT_TRUE(is_openai_error(r)) << printable(request);
  }
  EXPECT_TRUE(health_ok(port()));
}

// A body the server would read otherwise than a proxy before it: a Transfer-Encoding that does not
// end in chunked (RFC 9112 6.3: 400, then close; it was read by Content-Length), and a body in a
// Content-Encoding nothing here decodes (415; it was parsed as if plain).
TEST_F(ServerAbuseHttp, BodiesFramedOrEncodedBeyondWhatTheServerReadsAreRefused) {
  const std::string body = R"({"prompt":"Hi","max_tokens":2})";
  const std::string length = "Content-Length: " + std::to_string(body.size()) + "\r\n";
  struct Case {
    std::string extra_headers;
    int status;
  };
  for (const Case& c : {Case{"Transfer-Encoding: gzip\r\n" + length, 400},
                        Case{"Transfer-Encoding: chunked, gzip\r\n" + length, 400},
                        Case{"Content-Encoding: gzip\r\n" + length, 415}}) {
    RawConnection connection(port());
    connection.send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                    c.extra_headers + "\r\n" + body);
    RawResponse r;
    ASSERT_EQ(connection.read_response(r, 5s), ReadResult::kResponse) << c.extra_headers;
    EXPECT_EQ(r.status, c.status) << c.extra_headers << " -> " << printable(r.body);
    EXPECT_TRUE(is_openai_error(r));
    EXPECT_TRUE(connection.wait_closed(2s)) << "the unread body leaves the connection unusable";
  }
  RawResponse plain;  // identity is no encoding at all
  ASSERT_EQ(exchange(port(), http_request("POST", "/v1/completions", body, "Content-Encoding: identity\r\n"), plain),
            ReadResult::kResponse);
  EXPECT_EQ(plain.status, 200) << printable(plain.body);
  // JSON has no raw NUL anywhere (strings escape it as \u0000), and the parser stopped at one:
  // whatever followed it was ignored.
  RawResponse nul;
  ASSERT_EQ(exchange(port(), http_request("POST", "/v1/completions", body + std::string(1, '\0') + "garbage{{{"), nul),
            ReadResult::kResponse);
  EXPECT_EQ(nul.status, 400) << printable(nul.body);
  EXPECT_TRUE(is_openai_error(nul));
  EXPECT_TRUE(health_ok(port()));
}

TEST_F(ServerAbuseHttp, UnknownRouteGets404WrongMethod405WithAllowAndModelsById) {
  for (const std::string& request : {http_request("GET", "/nope"), http_request("POST", "/v1/engines", "{}")}) {
    RawResponse r;
    ASSERT_EQ(exchange(port(), request, r), ReadResult::kResponse);
    EXPECT_EQ(r.status, 404) << printable(request);
    EXPECT_TRUE(is_openai_error(r));
  }
  struct WrongMethod {
    const char* method;
    const char* path;
    const char* allowed;
  };
  for (const WrongMethod& c :
       {WrongMethod{"GET", "/v1/completions", "POST"}, WrongMethod{"GET", "/v1/chat/completions", "POST"},
        WrongMethod{"POST", "/health", "GET"}, WrongMethod{"DELETE", "/v1/models", "GET"},
        WrongMethod{"PUT", "/tokenize", "POST"}}) {
    RawResponse r;
    ASSERT_EQ(exchange(port(), http_request(c.method, c.path, std::string(c.method) == "GET" ? "" : "{}"), r),
              ReadResult::kResponse);
    EXPECT_EQ(r.status, 405) << c.method << " " << c.path;
    EXPECT_NE(r.header("Allow").find(c.allowed), std::string::npos)
        << c.method << " " << c.path << ": Allow '" << r.header("Allow") << "'";
    EXPECT_TRUE(is_openai_error(r));
  }
  RawResponse r;
  ASSERT_EQ(exchange(port(), http_request("GET", "/v1/models/tiny"), r), ReadResult::kResponse);
  ASSERT_EQ(r.status, 200) << r.body;
  json model = json::parse(r.body);
  EXPECT_EQ(model["id"], "tiny");
  EXPECT_EQ(model["object"], "model");
  ASSERT_EQ(exchange(port(), http_request("GET", "/v1/models/other-model"), r), ReadResult::kResponse);
  EXPECT_EQ(r.status, 404);
  EXPECT_TRUE(is_openai_error(r));
}

TEST_F(ServerAbuseHttp, PipelinedRequestsAreAnsweredInOrderAndKeepAliveHasNoCap) {
  RawConnection c(port());
  ASSERT_TRUE(c.send(http_request("GET", "/health") +
                     http_request("POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":2,"temperature":0})") +
                     http_request("GET", "/v1/models") + http_request("POST", "/tokenize", R"({"prompt":"Hello"})")));
  auto is = [](const RawResponse& r, const std::string& what) {
    if (what == "health") return r.body.find("ok") != std::string::npos;
    json body = json::parse(r.body, nullptr, false);
    if (what == "completion") return body.is_object() && body.value("object", "") == "text_completion";
    if (what == "models") return body.is_object() && body.value("object", "") == "list";
    return body.is_object() && body.contains("tokens");
  };
  for (const char* what : {"health", "completion", "models", "tokenize"}) {
    RawResponse r;
    ASSERT_EQ(c.read_response(r, 20s), ReadResult::kResponse) << what;
    EXPECT_EQ(r.status, 200) << what << ": " << r.body;
    EXPECT_TRUE(is(r, what)) << "out of order? expected the " << what << " answer, got " << printable(r.body);
  }
  // The same connection goes on for 50 more, as long as the client likes.
  for (int i = 0; i < 50; ++i) {
    const std::string request = i % 10 == 0
                                    ? http_request("POST", "/v1/completions", R"({"prompt":"Hi","max_tokens":1})")
                                    : http_request("GET", "/health");
    RawResponse r;
    ASSERT_TRUE(c.send(request)) << "request " << i;
    ASSERT_EQ(c.read_response(r, 20s), ReadResult::kResponse) << "request " << i << " on one connection";
    EXPECT_EQ(r.status, 200);
    ASSERT_NE(r.header("Connection"), "close") << "the server ended keep-alive after " << i + 5 << " requests";
  }
}

TEST_F(ServerAbuseHttp, Http10GetsWholeBodiesWithoutChunking) {
  const std::string whole = R"({"prompt":"Hello","max_tokens":4,"ignore_eos":true,"temperature":0})";
  const std::string streamed = R"({"prompt":"Hello","max_tokens":4,"ignore_eos":true,"temperature":0,"stream":true})";
  for (const std::string& body : {whole, streamed}) {
    RawConnection c(port());
    ASSERT_TRUE(c.send(http_request("POST", "/v1/completions", body, "", "HTTP/1.0")));
    RawResponse r;
    ASSERT_EQ(c.read_response(r, 20s), ReadResult::kResponse) << body;
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("Transfer-Encoding"), "") << "an HTTP/1.0 client cannot read chunked encoding: " << body;
    if (body == whole) {
      json answer = json::parse(r.body, nullptr, false);
      ASSERT_TRUE(answer.is_object()) << printable(r.body);
      EXPECT_EQ(answer["usage"]["completion_tokens"], 4);
    } else {
      auto frames = sse_payloads(r.body);
      ASSERT_GE(frames.size(), 2u) << printable(r.body);
      EXPECT_EQ(frames.back(), "[DONE]");
      EXPECT_EQ(r.body.substr(r.body.size() - 14), "data: [DONE]\n\n");
    }
    EXPECT_TRUE(c.wait_closed(2s)) << "an HTTP/1.0 answer ends with the connection";
  }
}

TEST_F(ServerAbuseHttp, StreamedEchoStartsWithThePromptAndEqualsWhole) {
  const std::string prompt = "The capital of France";
  const std::string request =
      R"({"prompt":")" + prompt + R"(","max_tokens":8,"temperature":0,"ignore_eos":true,"echo":true)";
  RawResponse whole, streamed;
  ASSERT_EQ(exchange(port(), http_request("POST", "/v1/completions", request + "}"), whole), ReadResult::kResponse);
  ASSERT_EQ(whole.status, 200) << whole.body;
  ASSERT_EQ(exchange(port(), http_request("POST", "/v1/completions", request + R"(,"stream":true})"), streamed),
            ReadResult::kResponse);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  const std::string whole_text = json::parse(whole.body)["choices"][0]["text"].get<std::string>();
  const std::string streamed_text = streamed_completion_text(streamed.body);
  EXPECT_EQ(whole_text.rfind(prompt, 0), 0u) << whole_text;
  EXPECT_EQ(streamed_text.rfind(prompt, 0), 0u) << "the streamed echo must start with the prompt: " << streamed_text;
  EXPECT_EQ(streamed_text, whole_text);
}

TEST_F(ServerAbuseHttp, DeepNestingGets400AndTheServerKeepsServing) {
  constexpr int kDepth = 100000;
  const std::string arrays = std::string(kDepth, '[') + std::string(kDepth, ']');
  std::string objects;
  for (int i = 0; i < kDepth; ++i) objects += R"({"a":)";
  objects += "1" + std::string(kDepth, '}');
  const std::string user = R"({"role":"user","content":"Hi"})";
  struct Case {
    const char* path;
    std::string body;
  };
  const Case cases[] = {
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":)" + arrays + "}]}"},
      {"/v1/chat/completions", R"({"messages":[)" + user + R"(],"tools":[{"type":"function","function":{"name":"f",)" +
                                   R"("parameters":{"type":"object","properties":{"a":)" + arrays + "}}}}]}"},
      {"/v1/chat/completions", R"({"messages":[)" + user + R"(],"tools":[{"type":"function","function":{"name":"f",)" +
                                   R"("parameters":)" + objects + "}}]}"},
      {"/v1/chat/completions", R"({"messages":[)" + user + R"(],"chat_template_kwargs":{"x":)" + objects + "}}"},
      {"/v1/chat/completions", R"({"messages":[)" + user +
                                   R"(,{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function",)" +
                                   R"("function":{"name":"f","arguments":")" + arrays + R"("}}]}]})"},
      {"/v1/completions", R"({"prompt":)" + arrays + "}"},
      {"/tokenize", R"({"messages":[{"role":"user","content":)" + arrays + "}]}"},
  };
  for (const Case& c : cases) {
    RawResponse r;
    ASSERT_EQ(exchange(port(), http_request("POST", c.path, c.body), r), ReadResult::kResponse)
        << printable(c.body, 160);
    EXPECT_EQ(r.status, 400) << printable(c.body, 160) << " -> " << printable(r.body);
    EXPECT_TRUE(is_openai_error(r));
    ASSERT_TRUE(health_ok(port())) << "after " << printable(c.body, 160);
  }
}

TEST_F(ServerAbuseHttp, HeaderLimitsGet431AndCloseAndAllowWhatFits) {
  auto fields = [](int count) {
    std::string lines;
    for (int i = 0; i < count; ++i) lines += "X-Field-" + std::to_string(i) + ": v\r\n";
    return lines;
  };
  for (const std::string& request :
       {http_request("GET", "/health", "", fields(200)),
        http_request("GET", "/health", "", "X-Big: " + std::string(64 << 10, 'a') + "\r\n"),
        http_request("GET", "/health?q=" + std::string(64 << 10, 'a'))}) {
    RawConnection c(port());
    c.send(request);
    RawResponse r;
    ASSERT_EQ(c.read_response(r, 5s), ReadResult::kResponse) << printable(request, 80);
    EXPECT_EQ(r.status, 431) << printable(request, 80);
    EXPECT_TRUE(is_openai_error(r));
    EXPECT_TRUE(c.wait_closed(2s)) << "431 closes the connection";
  }
  for (const std::string& request :
       {http_request("GET", "/health", "", fields(90)),
        http_request("GET", "/health", "", "X-Big: " + std::string(16 << 10, 'a') + "\r\n")}) {
    RawResponse r;
    ASSERT_EQ(exchange(port(), request, r), ReadResult::kResponse);
    EXPECT_EQ(r.status, 200) << "within the limits: " << printable(request, 80);
  }
}

TEST_F(ServerAbuseHttp, BodyOverTheLimitGets413HoweverFramed) {
  const size_t limit = HttpOptions{}.max_body_bytes;
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  {  // Content-Length says it all: 413 before a byte of the body
    RawConnection c(port());
    ASSERT_TRUE(c.send(head + "Content-Length: " + std::to_string(limit + 1) + "\r\n\r\n"));
    RawResponse r;
    ASSERT_EQ(c.read_response(r, 2s), ReadResult::kResponse) << "413 is due before any of the body is sent";
    EXPECT_EQ(r.status, 413);
    EXPECT_TRUE(is_openai_error(r));
    EXPECT_TRUE(c.wait_closed(2s));
  }
  // Chunked: sent until the server answers or stops reading, never past 4x the limit.
  constexpr size_t kChunk = 64 << 10;
  char size_line[32];
  std::snprintf(size_line, sizeof(size_line), "%zx\r\n", kChunk);
  const std::string chunk = size_line + std::string(kChunk, ' ') + "\r\n";  // JSON whitespace
  RawConnection c(port());
  ASSERT_TRUE(c.send(head + "Transfer-Encoding: chunked\r\n\r\n"));
  size_t sent = 0;
  while (sent < 4 * limit) {
    pollfd p{c.fd(), POLLIN, 0};
    if (::poll(&p, 1, 0) == 1 || !c.send(chunk, 2s)) break;
    sent += kChunk;
  }
  RawResponse r;
  ASSERT_EQ(c.read_response(r, 5s), ReadResult::kResponse) << "no answer after " << sent << " body bytes";
  EXPECT_EQ(r.status, 413);
  EXPECT_TRUE(is_openai_error(r));
  EXPECT_LT(sent, 4 * limit) << "the server read 4x max_body_bytes of a chunked body before answering";
  EXPECT_TRUE(health_ok(port()));
}

// A client that pipelines requests and then half-closes ("nothing more from me") gets answers
// or none, and its connection closed, wherever the half-close falls against the answers. It once
// fell between an answer's last write and the end of the read that watches for a hang-up: that
// read took the half-close, a later read never completed, and the connection stayed open with
// no deadline (the framing fuzzer met it twice in CI). Half-closing right after the first answer
// aims at the window, and the shape is repeated for a few seconds.
TEST_F(ServerAbuseHttp, AHalfCloseBehindPipelinedRequestsAlwaysEndsTheConnection) {
  const std::string body = R"({"prompt":"Hi","max_tokens":1})";
  const std::string completion = http_request("POST", "/v1/completions", body);
  // A long second head, so that the server reads the bytes in more than one piece (its first read
  // takes 1 KB): the unfixed server failed this test 3 runs of 3 so, 2 of 3 with two short heads.
  const std::string padded =
      http_request("POST", "/v1/completions", body, "X-Pad: " + std::string(1400, 'p') + "\r\n");
  const auto end = Clock::now() + 8s;
  int connections = 0;
  int answers = 0;
  while (Clock::now() < end) {
    RawConnection c(port());
    ASSERT_TRUE(c.connected());
    c.send(completion + padded);  // may fail: the server may have closed already
    // Half-closed at once, or as soon as the first answer is in: then the half-close arrives while
    // the server ends that answer, the narrow window.
    const bool at_once = connections % 2 == 0;
    if (at_once) c.shutdown_write();
    ++connections;
    for (int answered = 0;; ++answered) {
      RawResponse r;
      const ReadResult got = c.read_response(r, 20s);
      if (!at_once && answered == 0) c.shutdown_write();
      if (got == ReadResult::kClosed) break;
      ASSERT_EQ(got, ReadResult::kResponse) << "connection " << connections << ", after " << answered
                                            << " answers: neither answered nor closed 20 s after the half-close";
      ASSERT_EQ(r.status, 200) << r.body;
      ++answers;
    }
    c.reset();
  }
  std::printf("[half-close] %d connections, %d answers\n", connections, answers);
  EXPECT_TRUE(health_ok(port()));
}

TEST_F(ServerAbuseHttp, ClientLeavingMidStreamCountsAsAnAbort) {
  const std::string series = R"(tachyon:request_success_total{model_name="tiny",finished_reason="abort"})";
  const double before = metric_value(port(), series);
  ASSERT_GE(before, 0) << series << " missing from /metrics";
  {
    RawConnection c(port());
    ASSERT_TRUE(
        c.send(http_request("POST", "/v1/completions",
                            R"({"prompt":"Tell me a long story","max_tokens":450,"ignore_eos":true,"stream":true})")));
    ASSERT_TRUE(c.read_until("data: ", 10s));
    c.reset();
  }
  ASSERT_TRUE(server_->wait_idle(5s)) << "the abandoned stream must be aborted";
  double after = metric_value(port(), series);
  for (int i = 0; i < 100 && after == before; ++i) {  // counted as the server lets go of the request
    std::this_thread::sleep_for(20ms);
    after = metric_value(port(), series);
  }
  EXPECT_EQ(after, before + 1);
}

// ---------------------------------------------------------------------------------------------
// The three deadlines, shortened to a second so that the tests can wait them out.

class ServerAbuseTimeouts : public ServerAbuseHttp {
 protected:
  static void SetUpTestSuite() {  // TearDownTestSuite is ServerAbuseHttp's
    HttpOptions http;
    http.header_timeout = 1s;
    http.body_timeout = 1s;
    http.idle_timeout = 1s;
    server_ = new ServerUnderTest(ServerUnderTest::default_engine(), http);
  }
};

TEST_F(ServerAbuseTimeouts, SlowHeadOrBodyGets408ThenClose) {
  {  // a head dripped one byte every 50 ms: never whole before its deadline
    const std::string head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(200, 'a');
    RawConnection c(port());
    const auto start = Clock::now();
    for (char byte : head) {
      pollfd p{c.fd(), POLLIN, 0};
      if (::poll(&p, 1, 50) == 1 || !c.send(std::string_view(&byte, 1)) || Clock::now() - start > 5s) break;
    }
    RawResponse r;
    ASSERT_EQ(c.read_response(r, 3s), ReadResult::kResponse) << "no 408 after " << ms_since(start) << " ms";
    const double elapsed = ms_since(start);
    EXPECT_EQ(r.status, 408);
    EXPECT_TRUE(is_openai_error(r));
    EXPECT_GE(elapsed, 900) << "header_timeout is 1 s from the first byte";
    EXPECT_LE(elapsed, 3000);
    EXPECT_TRUE(c.wait_closed(2s));
  }
  {  // a whole head, then a tenth of the body it announced
    RawConnection c(port());
    const auto start = Clock::now();
    ASSERT_TRUE(
        c.send("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               "Content-Length: 100\r\n\r\n{\"prompt\":"));
    RawResponse r;
    ASSERT_EQ(c.read_response(r, 4s), ReadResult::kResponse);
    EXPECT_EQ(r.status, 408);
    EXPECT_TRUE(is_openai_error(r));
    EXPECT_GE(ms_since(start), 900) << "body_timeout is 1 s from the end of the head";
    EXPECT_TRUE(c.wait_closed(2s));
  }
}

TEST_F(ServerAbuseTimeouts, IdleConnectionsAreClosedWithoutAWord) {
  for (bool after_a_request : {false, true}) {
    RawConnection c(port());
    if (after_a_request) {  // kept alive after an answer, then nothing
      ASSERT_TRUE(c.send(http_request("GET", "/health")));
      RawResponse r;
      ASSERT_EQ(c.read_response(r, 5s), ReadResult::kResponse);
      EXPECT_EQ(r.status, 200);
    }
    const auto start = Clock::now();
    EXPECT_TRUE(c.wait_closed(4s)) << "idle_timeout is 1 s";
    EXPECT_GE(ms_since(start), 900);
    EXPECT_EQ(c.pending(), "") << "an idle connection is closed silently";
  }
}

// A client that stops reading its stream is cut off after write_timeout and its request aborted,
// instead of holding a generation (and its KV blocks) for as long as it likes. Loopback socket
// buffers hold megabytes, so the stream is made fat: 16 choices, 20 logprobs a token.
TEST(ServerAbuseWrites, AClientThatStopsReadingIsCutOffAndItsRequestAborted) {
  core::EngineConfig engine = ServerUnderTest::default_engine();
  engine.scheduler.max_model_len = 4096;
  engine.num_blocks = 2200;  // 16 x 2,000 tokens without preemption
  HttpOptions http;
  http.write_timeout = 1s;
  ServerUnderTest server(engine, http);
  RawConnection c(server.server->bound_port());
  int small = 4096;
  ::setsockopt(c.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  const std::string body =
      R"({"prompt":"x","n":16,"max_tokens":2000,"ignore_eos":true,"stream":true,"logprobs":20})";
  ASSERT_TRUE(c.send(http_request("POST", "/v1/completions", body)));
  // Never read. Without the deadline the engine would generate all 32,000 tokens into the run.
  const auto started = Clock::now();
  // Running, as the published gauges say (they trail the token counters by a step), so that
  // wait_idle below cannot see the engine idle before the request is in.
  const auto running = [&] {
    const auto stats = server.context->engine().stats();
    return stats.generated_tokens > 0 && stats.num_running > 0;
  };
  while (!running() && Clock::now() - started < 10s) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(running()) << "the stream never started";
  EXPECT_TRUE(server.wait_idle(std::chrono::seconds(60)));
  auto stats = server.context->engine().stats();
  EXPECT_EQ(stats.requests_aborted, 1);
  EXPECT_LT(stats.generated_tokens, 16 * 2000);
  std::printf("[write timeout] cut off after %lld tokens, %.1f s\n", static_cast<long long>(stats.generated_tokens),
              ms_since(started) / 1000);
  EXPECT_TRUE(health_ok(server.server->bound_port()));
}

// ---------------------------------------------------------------------------------------------
// Refusals that must come at once and say when to come back.

// Retry-After: a whole number of seconds, at least 1.
::testing::AssertionResult says_when_to_retry(const RawResponse& r) {
  const std::string value = r.header("Retry-After");
  if (!value.empty() && value.size() < 6 && value.find_first_not_of("0123456789") == std::string::npos &&
      std::stoi(value) >= 1) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "status " << r.status << " without Retry-After in seconds: '" << value << "'";
}

TEST(ServerAbuseLimits, FullQueue503AndClientShare429SayWhenToRetry) {
  core::EngineConfig engine = ServerUnderTest::default_engine();
  engine.scheduler.max_num_seqs = 1;
  engine.max_queued_requests = 2;
  ServerUnderTest server(engine);
  const int port = server.server->bound_port();
  const std::string long_request = R"({"prompt":"x","max_tokens":30,"ignore_eos":true})";
  std::mutex mutex;
  std::vector<RawResponse> answers;
  int failures = 0;
  std::vector<std::thread> clients;
  for (int i = 0; i < 12; ++i) {
    // Each from its own address: a per-client share (429) must not be what refuses them.
    clients.emplace_back([&, source = "127.0.0." + std::to_string(2 + i)] {
      RawConnection c(port, source);
      RawResponse r;
      c.send(http_request("POST", "/v1/completions", long_request));
      ReadResult got = c.read_response(r, 60s);
      std::lock_guard<std::mutex> lock(mutex);
      if (got == ReadResult::kResponse) answers.push_back(r);
      failures += got != ReadResult::kResponse;
    });
  }
  for (auto& c : clients) c.join();
  int ok = 0, refused = 0;
  for (const RawResponse& r : answers) {
    if (r.status == 200) {
      ++ok;
      continue;
    }
    ASSERT_EQ(r.status, 503) << r.body;
    ++refused;
    EXPECT_TRUE(is_openai_error(r));
    EXPECT_TRUE(says_when_to_retry(r));
  }
  EXPECT_EQ(failures, 0);
  EXPECT_GT(refused, 0);
  EXPECT_GT(ok, 0);
  EXPECT_TRUE(server.wait_idle());

  // One address past its share (half the queue: one sequence here) is refused with 429, while
  // another address is served.
  const std::string request =  // long enough to be in flight still when the second arrives
      http_request("POST", "/v1/completions", R"({"prompt":"x","max_tokens":100,"ignore_eos":true})");
  RawConnection first(port, "127.0.0.50");
  ASSERT_TRUE(first.send(request));
  for (int i = 0; i < 500 && server.context->engine().stats().num_active_requests == 0; ++i) {
    std::this_thread::sleep_for(2ms);
  }
  RawConnection second(port, "127.0.0.50");
  RawResponse r;
  ASSERT_TRUE(second.send(request));
  ASSERT_EQ(second.read_response(r, 10s), ReadResult::kResponse);
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_TRUE(is_openai_error(r));
  EXPECT_TRUE(says_when_to_retry(r));
  RawConnection other(port, "127.0.0.51");
  ASSERT_TRUE(other.send(http_request("POST", "/v1/completions", R"({"prompt":"x","max_tokens":1})")));
  ASSERT_EQ(other.read_response(r, 20s), ReadResult::kResponse);
  EXPECT_EQ(r.status, 200) << r.body;
  ASSERT_EQ(first.read_response(r, 20s), ReadResult::kResponse);
  EXPECT_EQ(r.status, 200) << r.body;
}

// Waits until the server holds `count` connections (it accepts asynchronously).
bool wait_open_connections(const ServerUnderTest& server, size_t count, Clock::duration limit) {
  const auto deadline = Clock::now() + limit;
  while (server.server->open_connections() != count && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  return server.server->open_connections() == count;
}

TEST(ServerAbuseLimits, ConnectionsBeyondMaxConnectionsGet503ThenClose) {
  HttpOptions http;
  http.max_connections = 8;
  ServerUnderTest server(ServerUnderTest::default_engine(), http);
  const int port = server.server->bound_port();
  std::vector<RawConnection> held;
  for (int i = 0; i < 8; ++i) {
    held.emplace_back(port);
    ASSERT_TRUE(held.back().connected());
  }
  ASSERT_TRUE(wait_open_connections(server, 8, 2s)) << server.server->open_connections();
  RawConnection extra(port);
  extra.send(http_request("GET", "/health"));
  RawResponse r;
  ASSERT_EQ(extra.read_response(r, 2s), ReadResult::kResponse);
  EXPECT_EQ(r.status, 503);
  EXPECT_TRUE(is_openai_error(r));
  EXPECT_TRUE(extra.wait_closed(2s));
  // The connections it holds are served as usual, and a place that frees up is taken again.
  ASSERT_TRUE(held[0].send(http_request("GET", "/health")));
  ASSERT_EQ(held[0].read_response(r, 2s), ReadResult::kResponse);
  EXPECT_EQ(r.status, 200);
  held.pop_back();
  ASSERT_TRUE(wait_open_connections(server, 7, 2s)) << server.server->open_connections();
  RawResponse again;
  ASSERT_EQ(exchange(port, http_request("GET", "/health"), again, 2s), ReadResult::kResponse);
  EXPECT_EQ(again.status, 200);
}

}  // namespace
}  // namespace tachyon::server::testing
