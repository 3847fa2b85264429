// The server's own request and response values: what a route handler reads and fills. They keep
// the handlers free of the socket library (routes never see Beast or Asio types), and they say
// the one thing a plain status + body cannot: a body produced over time (BodyStream), which the
// connection pumps on a worker thread whenever the producer has news.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tachyon::server {

struct HttpRequest {
  std::string method;  // "GET", "POST", ... as sent (HEAD is answered as GET without a body)
  std::string path;    // the target up to '?', as sent (not percent-decoded)
  std::string query;   // after '?', or ""
  int version = 11;    // 10 or 11
  std::string peer;    // the client's address ("127.0.0.1"), for per-client shares
  std::vector<std::pair<std::string, std::string>> headers;  // in arrival order
  std::string body;

  // The first header of that name (case-insensitive), or "" when absent.
  std::string header(std::string_view name) const;
};

// A response body produced over time: SSE frames, or a long non-streamed answer that writes a
// space now and then so a departed client is noticed. The connection calls pump() on a worker
// thread, never twice at once: after wakeup() was called (from any thread: the engine's), and
// at least every tick() otherwise. pump() appends what is ready to `out` (possibly nothing)
// and returns true once the body is complete. Destroying the stream abandons the body (a
// generation behind it is aborted).
class BodyStream {
 public:
  virtual ~BodyStream() = default;
  // Called once, before the first pump(); `wakeup` is cheap, never blocks, and stays safe to
  // call after the connection has gone.
  virtual void set_wakeup(std::function<void()> wakeup) = 0;
  virtual bool pump(std::string& out) = 0;
  // The answer's status, for a response whose head waits for its body (HttpResponse::
  // head_waits_for_body): asked once, when pump() first has bytes or is done, so an error found
  // while generating can still set it. nullopt: the response's own status.
  virtual std::optional<int> status() const { return std::nullopt; }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;                                          // unless `stream` is set
  std::vector<std::pair<std::string, std::string>> headers;  // extra fields: Allow, Retry-After, ...
  // Set: the body comes from the stream, chunked on HTTP/1.1, until close on HTTP/1.0.
  std::shared_ptr<BodyStream> stream;
  // With `stream`: the head goes out with the body's first bytes, carrying the stream's
  // status(), instead of before the first pump (a non-streamed answer that may yet fail).
  bool head_waits_for_body = false;
  bool close = false;  // close the connection after this response (framing errors, timeouts)
};

}  // namespace tachyon::server
