#include "tachyon/server/http/pd_router.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>

#include "tachyon/base/check.h"
#include "tachyon/server/anthropic_messages.h"
#include "tachyon/server/http/http_listener.h"
#include "tachyon/server/http/http_router.h"
#include "tachyon/server/http/http_server.h"
#include "tachyon/server/http/pd_roles.h"
#include "tachyon/server/http/pd_route_prompt.h"
#include "tachyon/server/http/pd_upstream.h"
#include "tachyon/server/openai_request_fields.h"
#include "tachyon/server/pd_transport.h"

namespace tachyon::server {
namespace {

// The shape of the router's own errors on a path: Anthropic's on /v1/messages, else OpenAI's.
ErrorBodyFn error_body_for(const std::string& path) {
  return path.starts_with("/v1/messages") ? anthropic_error_body : error_body;
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

ApiError unavailable(const std::string& message) { return {503, message, "service_unavailable", "", ""}; }

// Workers only start exchanges and pump relays, neither of which waits.
constexpr int kRouterWorkers = 8;
// A relay holds at most this much of a decode answer that its client has not taken; then it
// stops reading the answer until the client takes it (http/pd_upstream.h). 256 KiB is over a
// thousand streamed tokens; 1024 relays (--max-in-flight) hold at most 256 MiB.
constexpr size_t kRelayHeldBytes = 256 << 10;

// The lease a prefill server granted, as the decode server's header names it.
struct Lease {
  std::string host;
  int kv_port = 0;
  engine::KvLeaseKey key;
  std::string header() const {
    return host + ":" + std::to_string(kv_port) + ":" + std::to_string(key.epoch) + ":" + std::to_string(key.request_id);
  }
  // Best effort and off the caller's thread (a connection's I/O thread may drop the stream);
  // a lease already pulled is unknown there, so this is a no-op then.
  void release() const {
    std::thread([host = host, port = kv_port, key = key] { release_kv_remote(host, port, key, std::chrono::seconds(1)); })
        .detach();
  }
};

// Holds a backend's open-request count for as long as the router has a request on it.
class InFlight {
 public:
  explicit InFlight(Backend& backend) : backend_(backend) { ++backend_.in_flight; }
  ~InFlight() { --backend_.in_flight; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

 private:
  Backend& backend_;
};

// The decode server's answer, relayed as it arrives. Dropped before its end (the client left):
// the decode connection closes, which aborts the request there, and the lease is released.
// A non-streamed answer is held until it is whole (its head waits for it: HttpResponse::
// head_waits_for_body), so its status can say what happened: a decode server that failed gives
// 503, and an engine failure, which a decode server reports as an error body under the 200 it
// sent first (its keep-alive spaces need the head out), gives 500, as one server answers (an
// invalid_request_error body 400). One
// larger than kRelayHeldBytes goes out as a 200 from there on, as a streamed one does.
class RelayStream : public BodyStream {
 public:
  RelayStream(std::unique_ptr<UpstreamCall> call, std::optional<Lease> lease, bool sse, Backend& decode,
              RouterMetrics& metrics, TaskSlots::Slot slot)
      : call_(std::move(call)), lease_(std::move(lease)), sse_(sse), holding_(!sse), in_flight_(decode),
        decode_(decode), metrics_(metrics), slot_(std::move(slot)) {}
  ~RelayStream() override {
    if (ended_) return;
    metrics_.on_outcome(RouteOutcome::kClientGone);
    call_->cancel();
    if (lease_) lease_->release();
  }
  void set_wakeup(std::function<void()> wakeup) override { call_->set_wakeup(std::move(wakeup)); }
  std::optional<int> status() const override { return status_; }
  bool pump(std::string& out) override {
    if (holding_) return pump_held(out);
    const size_t before = out.size();
    const bool done = call_->take(out);
    if (!relayed_) relayed_ = out.find_first_not_of(" \r\n", before) != std::string::npos;
    if (out.size() > before) at_event_end_ = out.size() >= 2 && out.compare(out.size() - 2, 2, "\n\n") == 0;
    if (!done) return false;
    if (!call_->failed()) {
      end(RouteOutcome::kOk);
      return true;
    }
    // The decode server failed mid-answer: a clean error, never a truncated 200 that parses.
    fail_upstream();
    const std::string error = failed_error();
    if (sse_) {
      out += (at_event_end_ ? "" : "\n\n") + std::string("data: ") + error + "\n\ndata: [DONE]\n\n";
    } else if (!relayed_) {
      out += error;  // after keep-alive spaces only: the body is this one JSON value
    }
    return true;
  }

 private:
  // A non-streamed answer: nothing goes out until it is whole (or past the bound).
  bool pump_held(std::string& out) {
    const bool done = call_->take(held_);
    const size_t body = std::min(held_.find_first_not_of(" \r\n"), held_.size());  // past the keep-alive spaces
    if (!done) {
      if (held_.size() - body < kRelayHeldBytes) return false;
      holding_ = false;  // too large to hold: a 200 from here on, relayed as it comes
      relayed_ = true;
      out.append(held_, body);
      std::string().swap(held_);
      return false;
    }
    if (call_->failed()) {
      fail_upstream();
      status_ = 503;
      out += failed_error();
      return true;
    }
    // Under its 200 a decode server's body is an answer or an error: its engine failed (500), or
    // it ended the answer by itself (an Anthropic message's forced tool call: 400). A response
    // object of the Responses API carries "error": null.
    const auto json = nlohmann::json::parse(std::string_view(held_).substr(body), nullptr, false);
    const bool error = json.is_object() && json.contains("error") && !json["error"].is_null();
    const bool refused =
        error && json["error"].is_object() && json["error"].value("type", "") == "invalid_request_error";
    if (error) status_ = refused ? 400 : 500;
    end(refused ? RouteOutcome::kClientError : error ? RouteOutcome::kUpstreamFailed : RouteOutcome::kOk);
    out.append(held_, body);
    return true;
  }
  void end(RouteOutcome outcome) {
    ended_ = true;
    metrics_.on_outcome(outcome);
  }
  void fail_upstream() {
    decode_.healthy = false;
    end(RouteOutcome::kUpstreamFailed);
    if (lease_) lease_->release();
  }
  std::string failed_error() const {
    return error_body(unavailable("the decode server " + decode_.url + " failed mid-answer; retry"));
  }

  std::unique_ptr<UpstreamCall> call_;
  std::optional<Lease> lease_;
  const bool sse_;
  bool holding_;  // a non-streamed answer not yet out (pump_held)
  std::string held_;
  std::optional<int> status_;  // the head's status when it waited: 500 or 503; nullopt: 200
  InFlight in_flight_;
  Backend& decode_;
  RouterMetrics& metrics_;
  TaskSlots::Slot slot_;  // the request's --max-in-flight slot, until the relay ends
  bool relayed_ = false;  // bytes other than keep-alive whitespace went out
  bool at_event_end_ = true;  // what went out ends with a whole SSE event
  bool ended_ = false;
};

// A server's answer to a prefill request: a lease, none (the decode server computes the prompt),
// or an answer for the client (a 4xx, relayed).
struct PrefillResult {
  std::optional<Lease> lease;
  std::optional<HttpResponse> answer;
};

}  // namespace

PdRouter::PdRouter(RouterOptions options)
    : options_(std::move(options)), policy_(parse_route_policy(options_.policy)), prefill_(options_.prefill),
      decode_(options_.decode), in_flight_(options_.max_in_flight) {
  TACHYON_CHECK(!prefill_.backends().empty() && !decode_.backends().empty())
      << "the router needs at least one --prefill and one --decode URL";
  if (policy_ == RoutePolicy::kPrefix) {
    TACHYON_CHECK(!options_.tokenizer.empty())
        << "--policy prefix needs --tokenizer MODEL_DIR (the router hashes each prompt's blocks as the servers do)";
    route_prompt_ = std::make_unique<RoutePrompt>(options_.tokenizer);
  }
  http_options_ = std::make_unique<HttpOptions>();
  http_options_->host = options_.host;
  http_options_->port = options_.port;
  http_options_->threads = kRouterWorkers;
  http_options_->keepalive_interval = std::chrono::milliseconds(200);
  router_ = std::make_unique<Router>();
  // The routes that wait on upstream servers run as exchanges, on threads of their own.
  for (const char* path : {"/v1/completions", "/v1/chat/completions", "/v1/responses"}) {
    router_->add_async("POST", path, [this](const HttpRequest& req, Respond respond) {
      start_exchange(req, std::move(respond), &PdRouter::generate);
    });
  }
  // The Anthropic Messages API the same way; the router's own errors in Anthropic's shape.
  router_->add_async(
      "POST", "/v1/messages",
      [this](const HttpRequest& req, Respond respond) { start_exchange(req, std::move(respond), &PdRouter::generate); },
      nullptr, anthropic_error_body);
  // What any server answers alike, from the first healthy decode server: the model list, and
  // Anthropic's token count (tokenizing only; no KV involved).
  router_->add_async("GET", "/v1/models", [this](const HttpRequest& req, Respond respond) {
    start_exchange(req, std::move(respond), &PdRouter::forward_to_decode);
  });
  router_->add_async(
      "POST", "/v1/messages/count_tokens",
      [this](const HttpRequest& req, Respond respond) {
        start_exchange(req, std::move(respond), &PdRouter::forward_to_decode);
      },
      nullptr, anthropic_error_body);
  // /health and /metrics answer from memory on the I/O thread: they never wait behind the 64
  // workers, which may all be waiting on prefill and decode servers.
  router_->add_inline("GET", "/health", [this](const HttpRequest&, HttpResponse& res) {
    for (const auto& d : decode_.backends()) {
      if (d->healthy) {
        res.body = "{\"status\":\"ok\"}";
        return;
      }
    }
    res = error_response(unavailable("no decode server is healthy"));
  });
  router_->add_inline("GET", "/metrics", [this](const HttpRequest&, HttpResponse& res) {
    res.content_type = "text/plain; version=0.0.4";
    res.body = metrics_.render(prefill_, decode_,
                               RouterGauges{in_flight_.taken(), calls_.held_bytes(), calls_.paused_reads()});
  });
  listener_ = std::make_unique<HttpListener>(*http_options_, *router_);
}

PdRouter::~PdRouter() { stop(); }

void PdRouter::start_exchange(const HttpRequest& req, Respond respond, Step step) {
  {
    std::lock_guard lock(exchanges_mutex_);
    if (stopping_) throw ApiException(unavailable("the router is stopping"));
  }
  TaskSlots::Slot slot = in_flight_.try_take();
  heap_trim_.busy();
  if (slot == nullptr) {
    metrics_.on_outcome(RouteOutcome::kUnavailable);
    throw ApiException(unavailable("the router has " + std::to_string(in_flight_.limit()) +
                                   " requests in flight (--max-in-flight); retry shortly"));
  }
  {
    std::lock_guard lock(exchanges_mutex_);
    ++exchanges_;
  }
  auto run = [this, req, respond = std::move(respond), step, slot = std::move(slot)]() mutable {
    HttpResponse res;
    try {
      (this->*step)(req, res, slot);
    } catch (...) {
      res = exception_response(error_body_for(req.path));
    }
    slot.reset();  // a relay holds its own copy until its end
    respond(std::move(res));
    end_exchange();  // the last use of this: stop() may return right after
  };
  try {
    std::thread(std::move(run)).detach();
  } catch (const std::system_error&) {  // out of threads: this request only, and stop() still ends
    end_exchange();
    throw ApiException(unavailable("the router cannot start a thread for this request now; retry"));
  }
}

void PdRouter::end_exchange() {
  std::lock_guard lock(exchanges_mutex_);
  --exchanges_;
  exchanges_ended_.notify_all();
}

void PdRouter::forward_to_decode(const HttpRequest& req, HttpResponse& res, const TaskSlots::Slot&) {
  fields::check_body_depth(req.body, ServerLimits{}.max_json_depth);  // as generate() does
  for (Backend* decode : decode_.order(RoutePolicy::kRoundRobin)) {
    UpstreamRequest call_request{decode->host, decode->port, req.path, req.body, {}, std::chrono::seconds(30)};
    call_request.method = req.method;
    call_request.calls = &calls_;
    UpstreamCall call(std::move(call_request));
    const int status = call.wait_head();
    if (status == 0) continue;
    res.status = status;
    res.body = call.wait_body();
    return;
  }
  throw ApiException(unavailable("no decode server is healthy; retry later"));
}

void PdRouter::generate(const HttpRequest& req, HttpResponse& res, const TaskSlots::Slot& slot) {
  // The servers refuse a body nested deeper than their limit, and the router must not parse one
  // either: the prefix policy dumps its messages, one stack frame per level.
  fields::check_body_depth(req.body, ServerLimits{}.max_json_depth);
  const auto body = nlohmann::json::parse(req.body, nullptr, false);
  const auto stream = body.is_object() ? body.find("stream") : body.end();
  const bool sse = stream != body.end() && stream->is_boolean() && stream->get<bool>();
  const std::vector<int32_t> prompt =
      route_prompt_ != nullptr ? route_prompt_->tokens(req.path, req.body) : std::vector<int32_t>{};
  const ErrorBodyFn error_body_fn = error_body_for(req.path);

  // The client's address travels to both servers: their per-client quota and fair share are the
  // client's, not the router's (every request would otherwise come from one client).
  const std::vector<std::pair<std::string, std::string>> client = {{kClientHeader, req.peer}};

  // 1. The prompt on a prefill server.
  std::optional<Lease> lease;
  bool busy = false;     // a prefill server answered 503 (at its lease cap or queue)
  for (Backend* prefill : prefill_.order(policy_, prompt)) {
    InFlight in_flight(*prefill);
    const auto start = Clock::now();
    UpstreamCall call({prefill->host, prefill->port, req.path, req.body, client, std::chrono::seconds(300), "POST",
                       &calls_});
    const int status = call.wait_head();
    const std::string answer = call.wait_body();
    if (status == 0 || call.failed()) {
      prefill->healthy = false;
      metrics_.on_retry(/*prefill=*/true);
      continue;
    }
    metrics_.observe_prefill(seconds_since(start));
    if (status >= 400 && status < 500) {  // the decode server would refuse the same request
      metrics_.on_outcome(RouteOutcome::kClientError);
      res.status = status;
      res.body = answer;
      return;
    }
    if (status == 503) {
      busy = true;
      metrics_.on_retry(/*prefill=*/true);
      continue;
    }
    const auto json = nlohmann::json::parse(answer, nullptr, false);
    if (status == 200 && json.is_object() && json.contains("kv_transfer") && json["kv_transfer"].is_object()) {
      const auto& kv = json["kv_transfer"];
      lease = Lease{prefill->host, kv.value("port", 0),
                    {std::stoull(kv.value("epoch", std::string("0"))), kv.value("request_id", int64_t{0})}};
    }
    busy = false;
    if (status == 200 && policy_ == RoutePolicy::kPrefix) prefill->note_cached(prompt);
    break;
  }
  if (busy && !lease) {
    metrics_.on_outcome(RouteOutcome::kUnavailable);
    res = error_response(unavailable("every prefill server is at its KV lease cap or queue limit; retry later"),
                         error_body_fn);
    return;
  }

  // 2. The answer from a decode server, from the lease's rows.
  std::vector<std::pair<std::string, std::string>> headers = client;
  if (lease) headers.emplace_back(kKvSourceHeader, lease->header());
  const RoutePolicy decode_policy = policy_ == RoutePolicy::kRoundRobin ? policy_ : RoutePolicy::kLeastLoaded;
  for (Backend* decode : decode_.order(decode_policy)) {
    const auto start = Clock::now();
    auto call = std::make_unique<UpstreamCall>(UpstreamRequest{decode->host, decode->port, req.path, req.body, headers,
                                                               std::chrono::seconds(600), "POST", &calls_,
                                                               kRelayHeldBytes});
    const int status = call->wait_head();
    if (status == 0) {  // refused or reset before answering: nothing went to the client yet
      decode->healthy = false;
      metrics_.on_retry(/*prefill=*/false);
      continue;
    }
    metrics_.observe_decode_head(seconds_since(start));
    res.status = status;
    res.content_type = call->header("Content-Type");
    if (res.content_type.empty()) res.content_type = "application/json";
    if (status != 200) {  // a whole error answer (queue full, a bad request no prefill server saw)
      if (std::string retry = call->header("Retry-After"); !retry.empty()) res.headers.emplace_back("Retry-After", retry);
      res.body = call->wait_body();
      metrics_.on_outcome(status < 500 ? RouteOutcome::kClientError : RouteOutcome::kUnavailable);
      if (lease) lease->release();
      return;
    }
    if (sse) res.headers.emplace_back("Cache-Control", "no-cache");
    res.head_waits_for_body = !sse;  // RelayStream holds a non-streamed answer until it is whole
    res.stream = std::make_shared<RelayStream>(std::move(call), lease, sse, *decode, metrics_, slot);
    return;
  }
  if (lease) lease->release();
  metrics_.on_outcome(RouteOutcome::kUnavailable);
  res = error_response(unavailable("no decode server is healthy; retry later"), error_body_fn);
}

void PdRouter::check_health() {
  const bool load = policy_ != RoutePolicy::kRoundRobin;
  while (!stopping_) {
    prefill_.refresh(load, policy_ == RoutePolicy::kPrefix);
    decode_.refresh(load, false);
    // With nothing in flight, the memory the last requests freed goes back (base/heap_trim.h).
    if (in_flight_.taken() == 0) heap_trim_.idle();
    for (auto waited = std::chrono::milliseconds(0); waited < options_.health_interval && !stopping_;
         waited += std::chrono::milliseconds(20)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

int PdRouter::bind() { return listener_->bind(); }

void PdRouter::serve() {
  health_ = std::thread([this] { check_health(); });
  listener_->run();
}

void PdRouter::stop() {
  {
    std::lock_guard lock(exchanges_mutex_);
    stopping_ = true;
  }
  if (listener_) listener_->stop();
  calls_.cancel_all();
  std::unique_lock lock(exchanges_mutex_);
  exchanges_ended_.wait(lock, [this] { return exchanges_ == 0; });
  lock.unlock();
  if (health_.joinable()) health_.join();
}

}  // namespace tachyon::server
