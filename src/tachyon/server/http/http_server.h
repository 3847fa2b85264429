// HttpServer: the OpenAI-compatible HTTP front of a ServingContext, event-driven on Boost.Asio
// and Boost.Beast (see docs/architecture.md for why). A few I/O threads own every socket; a
// connection costs a socket and a small buffer, never a thread, so slow or idle clients cannot
// exhaust anything but their own deadlines. Handlers (JSON, templates, tokenizing) run on a
// separate worker pool, so a slow handler never stalls other connections' I/O; a streamed body
// is pumped on that pool whenever its generation has news (no thread waits on it).
//
// Limits, each answered with an OpenAI-style error body and documented in docs/api.md:
//   request head over max_header_bytes or max_header_count   431, then close
//   body over max_body_bytes, Content-Length or chunked        413, then close
//   head not complete within header_timeout of its first byte  408, then close
//   body not complete within body_timeout                      408, then close
//   no request begun within idle_timeout                       closed silently
//   a response the client does not read within write_timeout   closed (the run is aborted)
//   a wrong method on a known route                            405 with Allow
// Routes live in routes_generation.cpp and routes_info.cpp; the connection state machine in
// http_connection.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "tachyon/server/http/serving_context.h"

namespace tachyon::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: any free port (see bound_port())
  std::string api_key;             // when set, /v1/* needs "Authorization: Bearer <key>"
  size_t max_body_bytes = 8 << 20;        // however the body is framed; larger: 413
  size_t max_header_bytes = 32 << 10;     // request line + header fields; larger: 431
  size_t max_header_count = 100;          // header fields; more: 431
  std::chrono::milliseconds header_timeout{10000};  // from a request's first byte to its blank line
  std::chrono::milliseconds body_timeout{60000};    // from the blank line to the body's last byte
  std::chrono::milliseconds idle_timeout{120000};   // a kept-alive connection with no new request
  std::chrono::milliseconds write_timeout{30000};   // a client that stops reading its answer
  int io_threads = 0;  // socket threads; 0: min(4, cores)
  int threads = 0;     // handler and stream-pump workers; 0: max(4, 2 x cores)
  // Open connections beyond this are answered 503 and closed at once; 0: what the process's
  // open-file limit allows, less a reserve for the model's files and the engine.
  size_t max_connections = 0;
  std::chrono::milliseconds shutdown_timeout{30000};
  // A streamed body is pumped at least this often, and a decode server's non-streamed answer
  // (whose head goes first, routes_generation.cpp) writes a space this often while generating.
  std::chrono::milliseconds keepalive_interval{1000};
};

class HttpListener;
class Router;

class HttpServer {
 public:
  HttpServer(ServingContext& context, HttpOptions options);
  // Without a model yet: it can bind and answer /health with 503 while set_context() waits for
  // the model to load; every other route answers 503 too until then.
  explicit HttpServer(HttpOptions options);
  ~HttpServer();

  // Binds (throws Error naming host:port on failure); then serve() blocks until shutdown().
  void bind();
  int bound_port() const { return bound_port_; }
  void serve();
  // Graceful: refuse new requests (503), let in-flight ones finish for up to shutdown_timeout,
  // abort the rest (finish_reason "abort"), then stop serving. Safe from any thread.
  void shutdown();
  void set_context(ServingContext& context) { context_ = &context; }
  // Connections open now (for tests and metrics).
  size_t open_connections() const;

 private:
  // The model being served; throws a 503 ApiException while it loads.
  ServingContext& context() const;
  std::atomic<ServingContext*> context_{nullptr};
  HttpOptions options_;
  std::unique_ptr<Router> router_;
  std::unique_ptr<HttpListener> listener_;
  int bound_port_ = 0;
};

}  // namespace tachyon::server
