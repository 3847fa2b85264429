// PdRouter: the OpenAI-compatible front of prefill/decode disaggregation (`tachyon router`,
// docs/disaggregation.md). For POST /v1/completions and /v1/chat/completions it
//   1. sends the request to a prefill server (round-robin over the healthy ones), which runs the
//      prompt and answers with a KV lease (http/pd_roles.h); a 4xx from it goes back to the client
//      as is (the decode server would refuse the same request), any other failure leaves the
//      decode server to compute the prompt itself;
//   2. sends the request to a decode server with the lease in the X-Tachyon-Kv header and relays
//      its answer: whole, or streamed chunk by chunk. A client that hangs up closes the decode
//      connection (the decode server aborts the request and frees its KV); a lease that never
//      reaches a decode server is released on the prefill server (or times out there).
// No healthy decode server: 503 with Retry-After. Health: GET /health of every backend each
// health_interval; a failed request marks its backend down until the next good check.
// Built on cpp-httplib (thread per connection). Test: tests/server/run_pd.sh (ctest server.pd_*).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace httplib {
class Server;
}

namespace tachyon::server {

struct RouterOptions {
  std::vector<std::string> prefill;  // http://host:port of each prefill server
  std::vector<std::string> decode;   // http://host:port of each decode server
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  std::chrono::milliseconds health_interval{1000};
};

class PdRouter {
 public:
  struct Backend {
    std::string url;
    std::string host;
    int port = 0;
    std::atomic<bool> healthy{true};
  };

  explicit PdRouter(RouterOptions options);  // throws Error on a malformed URL
  ~PdRouter();
  int bind();    // returns the bound port
  void serve();  // blocks until stop()
  void stop();

 private:
  Backend* pick(std::vector<std::unique_ptr<Backend>>& backends, std::atomic<uint64_t>& next);
  void check_health();

  RouterOptions options_;
  std::vector<std::unique_ptr<Backend>> prefill_;
  std::vector<std::unique_ptr<Backend>> decode_;
  std::atomic<uint64_t> next_prefill_{0};
  std::atomic<uint64_t> next_decode_{0};
  std::unique_ptr<httplib::Server> http_;
  std::atomic<bool> stopping_{false};
  std::thread health_;
  int port_ = 0;
};

}  // namespace tachyon::server
