// PdRouter: the OpenAI-compatible front of prefill/decode disaggregation (`tachyon router`,
// docs/disaggregation.md), served by the project's own HTTP stack (http/http_listener.h), so a
// client that hangs up is noticed at once, streamed or not. For POST /v1/completions and
// /v1/chat/completions it
//   1. posts the request to a prefill server (chosen by the policy, http/pd_backends.h), which
//      runs the prompt and answers with a KV lease (http/pd_roles.h). A 4xx goes back to the
//      client as is; a server down is retried on the next; a server at its lease cap (503) too,
//      and when every one is, the client gets 503 with Retry-After; with none reachable the
//      decode server computes the prompt itself;
//   2. posts it to a decode server with the lease in the X-Tachyon-Kv header (retrying on the
//      next decode server when one fails before its answer's head) and relays the answer as it
//      comes, whole or streamed (http/pd_upstream.h).
// A client that leaves at any point closes the decode connection (the decode server aborts the
// request and frees its KV) and releases the lease on the prefill server (a no-op once pulled);
// one that leaves while the prompt runs is let go at once, and its decode connection closes when
// the decode answer starts.
// Why a thread per exchange: a request's way through the router waits on its upstream servers
// (the decode server's answer head comes only once the prompt's KV has arrived), and waiting on
// the HTTP workers let a few slow servers or clients take every worker and lock every other
// request out. Each exchange runs on a thread of its own until the decode answer's head (the
// body is then relayed by the connection without a thread waiting), so the workers never wait;
// a relay already costs its upstream call's thread, so this adds one thread per request only
// while its prompt is on the prefill server. Requests in flight (an exchange, then its relay)
// are bounded by --max-in-flight: each holds a slot (http/task_slots.h) from its start to its
// relay's end, and one past the bound gets 503 with Retry-After at once, so slow servers or
// clients cannot make the router start threads until it runs out of them or of descriptors.
// GET /health, /v1/models and the router's own /metrics (http/pd_router_metrics.h).
// Tests: tests/server/run_pd.sh and tests/server/pd_*.py (ctest -R server.pd_).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tachyon/base/heap_trim.h"
#include "tachyon/server/http/http_message.h"
#include "tachyon/server/http/http_router.h"
#include "tachyon/server/http/pd_backends.h"
#include "tachyon/server/http/pd_router_metrics.h"
#include "tachyon/server/http/pd_upstream.h"
#include "tachyon/server/http/task_slots.h"

namespace tachyon::server {

class HttpListener;
class RoutePrompt;
struct HttpOptions;

struct RouterOptions {
  std::vector<std::string> prefill;  // http://host:port of each prefill server
  std::vector<std::string> decode;   // http://host:port of each decode server
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  std::string policy = "round-robin";  // round-robin | least-loaded | prefix (http/pd_backends.h)
  std::filesystem::path tokenizer;     // the model directory, for the prefix policy
  std::chrono::milliseconds health_interval{1000};
  int64_t max_in_flight = 1024;  // requests at once (an exchange, then its relay); more: 503
};

class PdRouter {
 public:
  explicit PdRouter(RouterOptions options);  // throws Error on a malformed URL or option
  ~PdRouter();
  int bind();    // returns the bound port
  void serve();  // blocks until stop()
  void stop();  // cancels every upstream call and waits for every exchange to end

 private:
  // A step gets the request's --max-in-flight slot: a relayed answer holds it until its end.
  using Step = void (PdRouter::*)(const HttpRequest&, HttpResponse&, const TaskSlots::Slot&);
  // Runs `step` on a thread of its own and answers through `respond` when it returns.
  void start_exchange(const HttpRequest& req, Respond respond, Step step);
  void end_exchange();
  void generate(const HttpRequest& req, HttpResponse& res, const TaskSlots::Slot& slot);
  // GET /v1/models, POST /v1/messages/count_tokens: relayed from the first decode server that answers.
  void forward_to_decode(const HttpRequest& req, HttpResponse& res, const TaskSlots::Slot& slot);
  void check_health();

  RouterOptions options_;
  RoutePolicy policy_;
  std::unique_ptr<RoutePrompt> route_prompt_;  // prefix policy only
  BackendGroup prefill_;
  BackendGroup decode_;
  RouterMetrics metrics_;
  UpstreamCalls calls_;  // before listener_: the relays its connections hold leave it as they go
  TaskSlots in_flight_;  // before listener_ too: its relays hold slots until they go
  IdleHeapTrim heap_trim_;  // busy() as requests start; idle() from the health thread
  std::mutex exchanges_mutex_;
  std::condition_variable exchanges_ended_;
  int exchanges_ = 0;  // running now
  std::unique_ptr<HttpOptions> http_options_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<HttpListener> listener_;
  std::atomic<bool> stopping_{false};
  std::thread health_;
};

}  // namespace tachyon::server
