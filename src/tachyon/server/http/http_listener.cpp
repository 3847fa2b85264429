#include "tachyon/server/http/http_listener.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>

#include "tachyon/base/check.h"

namespace tachyon::server {

namespace {

int default_workers() { return std::max(4, 2 * static_cast<int>(std::thread::hardware_concurrency())); }
int default_io_threads() { return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 4); }

// The soft open-file limit raised to the hard one; returns the limit now in force.
size_t raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? (1u << 20) : static_cast<size_t>(limit.rlim_cur);
}

}  // namespace

HttpListener::HttpListener(const HttpOptions& options, const Router& router)
    : options_(options),
      io_(std::make_unique<net::io_context>()),
      workers_(static_cast<size_t>(options.threads > 0 ? options.threads : default_workers())),
      env_{options, router, workers_},
      acceptor_(std::make_unique<net::ip::tcp::acceptor>(net::make_strand(*io_))),
      accept_retry_(std::make_unique<net::steady_timer>(acceptor_->get_executor())) {
  const size_t files = raise_open_file_limit();
  // The rest of the process (model files, the engine, clients of its own) keeps a reserve.
  const size_t reserve = std::min<size_t>(256, files / 4);
  max_connections_ = options.max_connections > 0 ? options.max_connections : files - reserve;
}

HttpListener::~HttpListener() { tear_down(); }

int HttpListener::bind() {
  beast::error_code ec;
  net::ip::tcp::resolver resolver(*io_);
  auto endpoints = resolver.resolve(options_.host, std::to_string(options_.port), ec);
  TACHYON_CHECK(!ec && !endpoints.empty()) << "cannot bind to " << options_.host << ":" << options_.port
                                            << " (not an address of this host: " << ec.message() << ")";
  const net::ip::tcp::endpoint endpoint = endpoints.begin()->endpoint();
  acceptor_->open(endpoint.protocol(), ec);
  if (!ec) acceptor_->set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_->bind(endpoint, ec);
  if (!ec) acceptor_->listen(4096, ec);  // bursts of clients wait in the backlog, not refused
  TACHYON_CHECK(!ec) << "cannot bind to " << options_.host << ":" << options_.port << " (" << ec.message()
                     << ": in use, or not an address of this host)";
  return acceptor_->local_endpoint().port();
}

void HttpListener::run() {
  accept();
  const int threads = options_.io_threads > 0 ? options_.io_threads : default_io_threads();
  std::vector<std::thread> pool;
  for (int i = 1; i < threads; ++i) pool.emplace_back([this] { io_->run(); });
  io_->run();
  for (auto& t : pool) t.join();
  tear_down();
}

void HttpListener::stop() {
  std::lock_guard lock(lifecycle_);
  if (torn_down_) return;
  io_->stop();  // the acceptor closes in tear_down(), once no I/O thread runs
}

void HttpListener::accept() {
  acceptor_->async_accept(net::make_strand(*io_), [this](beast::error_code ec, net::ip::tcp::socket socket) {
    on_accept(ec, std::move(socket));
  });
}

void HttpListener::on_accept(beast::error_code ec, net::ip::tcp::socket socket) {
  if (ec == net::error::operation_aborted || !acceptor_->is_open()) return;
  if (ec) {
    // Out of descriptors (or a transient failure): retry shortly instead of spinning.
    accept_retry_->expires_after(std::chrono::milliseconds(50));
    accept_retry_->async_wait([this](beast::error_code wait_ec) {
      if (!wait_ec) accept();
    });
    return;
  }
  if (env_.open.load() >= max_connections_) {
    refuse(socket);
  } else {
    std::make_shared<HttpConnection>(std::move(socket), env_)->start();
  }
  accept();
}

// One small write that cannot block (the socket buffer is empty), then close.
void HttpListener::refuse(net::ip::tcp::socket& socket) {
  const std::string body = error_body({503, "too many open connections; retry shortly", "service_unavailable", "", ""});
  const std::string answer = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                             "Connection: close\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n" + body;
  beast::error_code ec;
  socket.non_blocking(true, ec);
  socket.write_some(net::buffer(answer), ec);
  socket.shutdown(net::ip::tcp::socket::shutdown_both, ec);
  socket.close(ec);
}

// Wakeups stop first, then workers finish their pumps, then the I/O context and with it every
// connection (and the generation behind each stream) goes, while the engine still lives.
void HttpListener::tear_down() {
  std::lock_guard lock(lifecycle_);
  if (torn_down_) return;
  torn_down_ = true;
  env_.gate->close();
  io_->stop();
  workers_.join();
  accept_retry_.reset();
  acceptor_.reset();
  io_.reset();
}

}  // namespace tachyon::server
