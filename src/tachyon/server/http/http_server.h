// HttpServer: the OpenAI-compatible HTTP front of a ServingContext, on cpp-httplib (thread per
// connection from a fixed pool; SSE through chunked content providers). Routes live in
// routes_generation.cpp (/v1/completions, /v1/chat/completions) and routes_info.cpp (models,
// health, version, metrics, tokenize, detokenize). JSON, templates and (de)tokenization happen
// here, on HTTP threads; the engine sees token ids only.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "tachyon/server/http/serving_context.h"

namespace httplib {
class Server;
}

namespace tachyon::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                  // 0: any free port (see bound_port())
  std::string api_key;              // when set, /v1/* needs "Authorization: Bearer <key>"
  size_t max_body_bytes = 8 << 20;  // larger bodies get 413
  int threads = 1024;               // concurrent connections served (a thread each)
  std::chrono::milliseconds shutdown_timeout{30000};
  // A non-streamed answer writes a space this often while generating, so that a client that
  // left is noticed (the write fails) and its request aborted.
  std::chrono::milliseconds keepalive_interval{1000};
};

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

 private:
  void add_routes();
  void add_generation_routes();
  void add_info_routes();

  // The model being served; null while it loads.
  ServingContext& context() const;
  std::atomic<ServingContext*> context_{nullptr};
  HttpOptions options_;
  std::unique_ptr<httplib::Server> http_;
  int bound_port_ = 0;
  int listen_socket_ = -1;
};

}  // namespace tachyon::server
