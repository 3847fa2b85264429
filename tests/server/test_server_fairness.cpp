// One client cannot hold the engine beyond its share: the sequences (prompts x n) a client
// address has in flight are capped (ClientQuota, default half the waiting queue); past the cap it
// gets 429 with Retry-After while other clients are served, and its share comes back when its
// answers are done or abandoned. Inside the engine, the fair scheduling policy keys each request
// by its address and `user` (fair_share_client): one client's long prompts delay another's short
// request by a step, not by their whole prefill.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "server_fixture.h"
#include "tachyon/server/http/client_quota.h"
#include "tachyon/server/openai_protocol.h"
#include "tachyon/server/openai_request_fields.h"
#include "tachyon/server/openai_errors.h"

namespace tachyon::server::testing {
namespace {

TEST(ClientQuota, SharesArePerClientAndComeBack) {
  ClientQuota quota(4);
  auto a = quota.acquire("10.0.0.1", 3);
  EXPECT_THROW(quota.acquire("10.0.0.1", 2), ApiException);
  try {
    quota.acquire("10.0.0.1", 2);
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error().status, 429);
    EXPECT_NE(e.error().message.find("limit per client is 4"), std::string::npos) << e.error().message;
  }
  auto b = quota.acquire("10.0.0.2", 4);  // another client is not affected
  auto c = quota.acquire("10.0.0.1", 1);
  EXPECT_EQ(quota.in_flight("10.0.0.1"), 4);
  a.reset();
  c.reset();
  EXPECT_EQ(quota.in_flight("10.0.0.1"), 0);
  EXPECT_NO_THROW(quota.acquire("10.0.0.1", 4));
  ClientQuota unlimited(-1);
  EXPECT_NO_THROW(unlimited.acquire("x", 1 << 20));
}

// A blocking socket from `source` (any 127/8 address works on loopback) to the server.
int connect_from(const char* source, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &local.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) return -1;
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0) return -1;
  timeval timeout{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  return fd;
}

void send_post(int fd, const std::string& path, const std::string& body) {
  const std::string request = "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
}

// The status line and headers of the answer on `fd`.
std::string read_head(int fd) {
  std::string head;
  char c = 0;
  while (head.find("\r\n\r\n") == std::string::npos && ::recv(fd, &c, 1, 0) == 1) head += c;
  return head;
}

TEST(ServerFairness, AClientPastItsShareGets429WhileOthersAreServed) {
  core::EngineConfig engine = ServerUnderTest::default_engine();
  engine.max_queued_requests = 8;  // a client's share: 4 sequences
  engine.scheduler.max_model_len = 4096;
  engine.num_blocks = 1100;
  ServerUnderTest server(engine);
  const int port = server.server->bound_port();
  const std::string long_stream =
      R"({"prompt":["a","b"],"n":2,"max_tokens":3000,"ignore_eos":true,"stream":true})";  // 4 sequences

  int hog = connect_from("127.0.0.1", port);
  ASSERT_GE(hog, 0);
  send_post(hog, "/v1/completions", long_stream);
  EXPECT_NE(read_head(hog).find("HTTP/1.1 200"), std::string::npos);

  int again = connect_from("127.0.0.1", port);
  send_post(again, "/v1/completions", R"({"prompt":"c","max_tokens":2})");
  const std::string refused = read_head(again);
  EXPECT_NE(refused.find("HTTP/1.1 429"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos) << refused;
  ::close(again);

  int other = connect_from("127.0.0.2", port);  // another client address
  ASSERT_GE(other, 0) << "cannot bind 127.0.0.2";
  send_post(other, "/v1/completions", R"({"prompt":"c","max_tokens":2})");
  EXPECT_NE(read_head(other).find("HTTP/1.1 200"), std::string::npos);
  ::close(other);

  ::close(hog);  // the hog leaves: its four sequences are aborted and its share comes back
  // Waits for the share itself, not for the engine: the hog's sequences may have finished
  // generating already (the engine idle) while their answer still waits on its unread socket,
  // holding the share until the server sees the close.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server.context->client_quota().in_flight("127.0.0.1") != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(server.wait_idle(std::chrono::seconds(10)));
  auto res = server.client().Post("/v1/completions", R"({"prompt":"c","max_tokens":2})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(server.context->client_quota().in_flight("127.0.0.1"), 0);
}

TEST(FairShareClient, TheAddressAndTheUserMakeTheKey) {
  const uint64_t plain = fair_share_client("10.0.0.1", "");
  EXPECT_NE(plain, 0u);
  EXPECT_EQ(plain, fair_share_client("10.0.0.1", ""));
  EXPECT_NE(plain, fair_share_client("10.0.0.2", ""));
  EXPECT_NE(plain, fair_share_client("10.0.0.1", "alice"));
  EXPECT_NE(fair_share_client("10.0.0.1", "alice"), fair_share_client("10.0.0.1", "bob"));
  EXPECT_NE(fair_share_client("10.0.0.1", "1"), fair_share_client("10.0.0.11", ""));
}

TEST(FairShareClient, TheUserIsReadAndBounded) {
  ServerLimits limits;
  limits.model_name = "m";
  EXPECT_EQ(parse_completion_request(R"({"prompt":"a","user":"alice"})", limits).user, "alice");
  const std::string chat = R"({"messages":[{"role":"user","content":"a"}],"safety_identifier":"bob"})";
  EXPECT_EQ(parse_chat_request(chat, limits).user, "bob");
  EXPECT_EQ(parse_completion_request(R"({"prompt":"a"})", limits).user, "");
  const std::string too_long = R"({"prompt":"a","user":")" + std::string(fields::kMaxUserBytes + 1, 'u') + R"("})";
  for (const std::string& body : {std::string(R"({"prompt":"a","user":7})"), too_long}) {
    try {
      parse_completion_request(body, limits);
      ADD_FAILURE() << "accepted " << body.substr(0, 60);
    } catch (const ApiException& e) {
      EXPECT_EQ(e.error().status, 400);
      EXPECT_EQ(e.error().param, "user") << e.error().message;
    }
  }
}

// Six 1,500-token prompts of one user, then a one-token request of another user from the same
// address: the short request is answered while the long prompts are still being computed (16
// tokens a step). From the same user it waits behind all of them (the same client: arrival order).
TEST(ServerFairness, AnotherUsersLongPromptsDelayAShortRequestByAStepNotTheirRun) {
  core::EngineConfig engine = ServerUnderTest::default_engine();
  engine.scheduler.max_model_len = 2048;
  engine.scheduler.max_num_batched_tokens = 16;
  engine.num_blocks = 1200;
  ServerUnderTest server(engine);
  constexpr int64_t kHeavyTokens = 6 * 1500;
  int round = 0;
  for (const char* probe_user : {"probe", "heavy"}) {
    ASSERT_TRUE(server.wait_idle());
    const int64_t computed_before = server.context->engine().stats().prompt_tokens_computed;
    nlohmann::json prompts = nlohmann::json::array();  // new ones each round: no prefix-cache hits
    for (int p = 0; p < 6; ++p) {
      std::vector<int32_t> ids(1500);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(100 + (i * 7 + p + 6 * round) % 800);
      prompts.push_back(ids);
    }
    ++round;
    nlohmann::json heavy = {{"prompt", prompts}, {"max_tokens", 1}, {"user", "heavy"}};
    std::thread hog([&] {
      auto res = server.client().Post("/v1/completions", heavy.dump(), "application/json");
      EXPECT_TRUE(res && res->status == 200);
    });
    auto computed = [&] { return server.context->engine().stats().prompt_tokens_computed - computed_before; };
    // The probe goes once the engine holds all six long prompts and computes them: sent earlier (the
    // route submits them one by one), it could arrive before the last ones, as it once did in CI.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (computed() == 0 || server.context->engine().stats().num_live_sequences < 6) {
      if (std::chrono::steady_clock::now() > deadline) {  // no ASSERT: the hog thread must be joined
        ADD_FAILURE() << "the six long prompts never ran together";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    nlohmann::json probe = {{"prompt", "hi"}, {"max_tokens", 1}, {"user", probe_user}};
    auto res = server.client().Post("/v1/completions", probe.dump(), "application/json");
    const int64_t computed_at_answer = computed();
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    if (std::string(probe_user) == "probe") {
      EXPECT_LT(computed_at_answer, kHeavyTokens / 2) << "the other user's request waited for the long prompts";
    } else {
      EXPECT_GE(computed_at_answer, kHeavyTokens) << "one user's requests run in arrival order";
    }
    hog.join();
  }
}

}  // namespace
}  // namespace tachyon::server::testing
