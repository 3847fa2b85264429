// The server under stress: clients that give up mid-stream (their requests are aborted and
// every gauge returns to zero), a full waiting queue (refused at once with 503, not queued),
// and graceful shutdown (503 for newcomers, in-flight streams end with [DONE]).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <nlohmann/json.hpp>

#include "raw_http.h"
#include "server_fixture.h"

namespace tachyon::server::testing {
namespace {

using nlohmann::json;

const std::string kLongStream =
    R"({"prompt":"Tell me a long story","max_tokens":400,"ignore_eos":true,"stream":true})";

// Opens a stream and hangs up after the first chunk.
void give_up_after_first_chunk(const ServerUnderTest& server) {
  auto client = server.client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = kLongStream;
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [](const char*, size_t, uint64_t, uint64_t) { return false; };  // hang up
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  client.send(req, res, error);
  EXPECT_EQ(res.status, 200) << "the server must take every client of the burst";
}

TEST(ServerReliability, DisconnectFloodLeavesNothingBehind) {
  ServerUnderTest server;
  std::vector<std::thread> clients;
  for (int i = 0; i < 48; ++i) clients.emplace_back([&] { give_up_after_first_chunk(server); });
  for (auto& c : clients) c.join();
  // Every abandoned request is aborted: gauges and KV usage back to zero, long before the
  // 400 tokens each one asked for could have been generated.
  EXPECT_TRUE(server.wait_idle(std::chrono::seconds(5)));
  auto stats = server.context->engine().stats();
  EXPECT_EQ(stats.requests_aborted + stats.requests_finished, 48);
  EXPECT_GT(stats.requests_aborted, 24);
  EXPECT_LT(stats.generated_tokens, 48 * 400 / 2);
  auto fresh = server.client().Post("/v1/completions", R"({"prompt":"hi","max_tokens":4})", "application/json");
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->status, 200);
  ASSERT_TRUE(server.wait_idle());  // the engine publishes its gauges after the step that answered
  std::string metrics = server.client().Get("/metrics")->body;
  EXPECT_NE(metrics.find("tachyon:num_requests_running{model_name=\"tiny\"} 0"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("tachyon:num_requests_waiting{model_name=\"tiny\"} 0"), std::string::npos);
}

// A non-streamed answer sends nothing before it is complete (its head waits for its status): the
// client leaves once the engine is generating for it, having read nothing, after sending
// `pipelined_bytes` more (GET /health requests pipelined behind). Past a head's worth (32 KiB) the
// connection keeps none of them, yet still reads on, so it sees the hang-up all the same.
void expect_aborted_when_the_client_leaves(size_t pipelined_bytes) {
  core::EngineConfig engine = ServerUnderTest::default_engine();
  engine.scheduler.max_model_len = 16384;  // long enough to outlast the client by far
  engine.num_blocks = 1100;
  ServerUnderTest server(engine);
  {
    RawConnection client(server.server->bound_port());
    ASSERT_TRUE(
        client.send(http_request("POST", "/v1/completions", R"({"prompt":"x","max_tokens":16000,"ignore_eos":true})")));
    const auto generating = std::chrono::steady_clock::now() + std::chrono::seconds(8);
    while (server.context->engine().stats().generated_tokens == 0 && std::chrono::steady_clock::now() < generating) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_GT(server.context->engine().stats().generated_tokens, 0);
    std::string pipelined;
    while (pipelined.size() < pipelined_bytes) pipelined += http_request("GET", "/health");
    ASSERT_TRUE(client.send(pipelined));
  }
  // Aborted once the connection's read sees the hang-up, long before 16,000 tokens. Idle alone
  // is not enough to wait for: the stats can read idle before the abort is counted.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  while (server.context->engine().stats().requests_aborted == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(server.wait_idle(std::chrono::seconds(8)));
  auto stats = server.context->engine().stats();
  EXPECT_EQ(stats.requests_aborted, 1);
  EXPECT_LT(stats.generated_tokens, 16000);
}

TEST(ServerReliability, NonStreamedRequestIsAbortedWhenTheClientLeaves) { expect_aborted_when_the_client_leaves(0); }

TEST(ServerReliability, NonStreamedRequestIsAbortedWhenTheClientLeavesBehindAFullPipeline) {
  expect_aborted_when_the_client_leaves(64u << 10);
}

// A client that pipelines more than 32 KiB behind a request being answered gets that answer, with
// "Connection: close", and the connection closes after it: the requests behind go unanswered.
TEST(ServerReliability, APipelineBeyondAHeadsWorthEndsTheConnectionAfterTheAnswer) {
  ServerUnderTest server;
  RawConnection client(server.server->bound_port());
  std::string pipelined;
  while (pipelined.size() < (64u << 10)) pipelined += http_request("GET", "/health");
  ASSERT_TRUE(client.send(
      http_request("POST", "/v1/completions", R"({"prompt":"x","max_tokens":400,"ignore_eos":true})") + pipelined));
  RawResponse r;
  ASSERT_EQ(client.read_response(r, std::chrono::seconds(20)), ReadResult::kResponse);
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("Connection"), "close");
  EXPECT_EQ(json::parse(r.body)["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(client.wait_closed(std::chrono::seconds(10)));
}

TEST(ServerReliability, HealthSays503WhileTheModelLoads) {
  HttpOptions http;
  http.port = 0;
  HttpServer loading(http);  // listening, no model yet
  loading.bind();
  std::thread serving([&] { loading.serve(); });
  httplib::Client client("127.0.0.1", loading.bound_port());
  auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_NE(health->body.find("loading"), std::string::npos);
  auto generation = client.Post("/v1/completions", R"({"prompt":"x"})", "application/json");
  EXPECT_EQ(generation->status, 503);
  ServerUnderTest loaded;  // a model, handed to the listening server once it is ready
  loading.set_context(*loaded.context);
  EXPECT_EQ(client.Get("/health")->status, 200);
  EXPECT_EQ(client.Post("/v1/completions", R"({"prompt":"x","max_tokens":2})", "application/json")->status, 200);
  loading.shutdown();
  serving.join();
}

TEST(ServerReliability, AThousandConcurrentStreams) {
  core::EngineConfig engine = ServerUnderTest::default_engine();
  engine.num_blocks = 2048;
  ServerUnderTest server(engine);
  constexpr int kStreams = 1000;
  std::atomic<int> completed{0}, opened{0};
  std::atomic<int> peak_running{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&] {
      httplib::Client client("127.0.0.1", server.server->bound_port());
      client.set_read_timeout(std::chrono::seconds(120));
      client.set_connection_timeout(std::chrono::seconds(60));
      auto r = client.Post("/v1/completions", R"({"prompt":"hello","max_tokens":24,"ignore_eos":true,"stream":true})",
                           "application/json");
      if (r && r->status == 200 && r->body.find("data: [DONE]") != std::string::npos) ++completed;
    });
    ++opened;
  }
  // Sample how many requests the engine holds at once while the streams run.
  std::thread sampler([&] {
    while (completed < kStreams && opened == kStreams) {
      auto s = server.context->engine().stats();
      peak_running = std::max<int>(peak_running, static_cast<int>(s.num_active_requests));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      static int guard = 0;
      if (++guard > 20000) break;
    }
  });
  for (auto& c : clients) c.join();
  sampler.join();
  std::printf("[1000 streams] completed %d, peak requests in the engine at once %d\n", completed.load(), peak_running.load());
  EXPECT_EQ(completed, kStreams);
  EXPECT_TRUE(server.wait_idle());
}

TEST(ServerReliability, FullQueueIsRefusedAtOnce) {
  core::EngineConfig engine = ServerUnderTest::default_engine();
  engine.scheduler.max_num_seqs = 1;
  engine.max_queued_requests = 2;
  // Every client here shares one address: without lifting the per-client share (one sequence of a
  // two-deep queue) most would get 429 before the queue fills (test_server_fairness.cpp).
  ServerUnderTest server(engine, {}, /*max_sequences_per_client=*/-1);
  std::atomic<int> ok{0}, refused{0}, other{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 12; ++i) {
    clients.emplace_back([&] {
      auto r = server.client().Post("/v1/completions", R"({"prompt":"x","max_tokens":60,"ignore_eos":true})",
                                    "application/json");
      if (r && r->status == 200) ++ok;
      else if (r && r->status == 503 && r->body.find("queue is full") != std::string::npos) ++refused;
      else ++other;
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_GT(refused, 0);
  EXPECT_GT(ok, 0);
  EXPECT_EQ(other, 0);
  EXPECT_TRUE(server.wait_idle());
}

TEST(ServerReliability, GracefulShutdownFinishesOrAbortsInFlight) {
  HttpOptions http;
  http.shutdown_timeout = std::chrono::milliseconds(300);
  core::EngineConfig engine = ServerUnderTest::default_engine();
  engine.scheduler.max_model_len = 16384;  // a stream that outlives the shutdown timeout
  engine.num_blocks = 1100;
  auto server = std::make_unique<ServerUnderTest>(engine, http);
  std::string body;
  std::thread streaming([&] {
    auto r = server->client().Post("/v1/completions",
                                   R"({"prompt":"x","max_tokens":16000,"ignore_eos":true,"stream":true})",
                                   "application/json");
    if (r) body = r->body;
  });
  // Wait for it to be generating, then start draining.
  for (int i = 0; i < 500 && server->context->engine().stats().generated_tokens < 5; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::thread drainer([&] { server->server->shutdown(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(server->context->draining());
  auto refused = server->client().Post("/v1/completions", R"({"prompt":"x","max_tokens":1})", "application/json");
  if (refused) {
    EXPECT_EQ(refused->status, 503);
  }
  auto health = server->client().Get("/health");
  if (health) {
    EXPECT_EQ(health->status, 503);
  }
  drainer.join();
  streaming.join();
  auto frames = sse_payloads(body);
  ASSERT_GE(frames.size(), 2u) << body;
  EXPECT_EQ(frames.back(), "[DONE]");
  json last = json::parse(frames[frames.size() - 2]);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "abort");
  server.reset();
}

}  // namespace
}  // namespace tachyon::server::testing
