// HttpListener: the accepting socket, the I/O threads, the worker pool, and the bound on open
// connections (internal to server/http/). Connections beyond max_connections get a 503 with
// Retry-After and are closed at once, so the process never runs out of descriptors for its own
// files. Raises the process's open-file limit to its hard limit: every connection is one.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "tachyon/server/http/http_connection.h"

namespace tachyon::server {

class HttpListener {
 public:
  HttpListener(const HttpOptions& options, const Router& router);
  ~HttpListener();

  // Binds and listens; returns the port (throws Error naming host:port on failure).
  int bind();
  // Runs the I/O threads until stop(); then drops every connection (and the generations behind
  // their streams) before returning.
  void run();
  void stop();  // any thread
  size_t open_connections() const { return env_.open.load(); }
  size_t max_connections() const { return max_connections_; }

 private:
  void accept();
  void on_accept(beast::error_code ec, net::ip::tcp::socket socket);
  void refuse(net::ip::tcp::socket& socket);
  void tear_down();

  const HttpOptions& options_;
  std::unique_ptr<net::io_context> io_;
  net::thread_pool workers_;
  ConnectionEnv env_;
  // Both live on io_ and go before it.
  std::unique_ptr<net::ip::tcp::acceptor> acceptor_;
  std::unique_ptr<net::steady_timer> accept_retry_;
  size_t max_connections_ = 0;
  std::mutex lifecycle_;  // stop() against tear_down()
  bool torn_down_ = false;
};

}  // namespace tachyon::server
