#include "tachyon/server/http/http_server.h"

#include <atomic>
#include <thread>

#include <sys/socket.h>

#include "tachyon/base/check.h"
#include "tachyon/server/http/http_util.h"

namespace tachyon::server {

std::string make_request_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t boot = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%s-%012llx%08llx", prefix, static_cast<unsigned long long>(boot & 0xffffffffffffull),
                static_cast<unsigned long long>(counter.fetch_add(1)));
  return buffer;
}

HttpServer::HttpServer(ServingContext& context, HttpOptions options) : HttpServer(std::move(options)) {
  context_ = &context;
}

HttpServer::HttpServer(HttpOptions options) : options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  const int threads = options_.threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  http_->set_payload_max_length(options_.max_body_bytes);
  // cpp-httplib 0.11 listens with a backlog of 5, which refuses bursts of clients; remember the
  // listening socket so bind() can raise it.
  http_->set_socket_options([this](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_socket_ = static_cast<int>(sock);
  });
  http_->set_read_timeout(std::chrono::seconds(30));
  http_->set_write_timeout(std::chrono::seconds(30));
  add_routes();
}

HttpServer::~HttpServer() = default;

ServingContext& HttpServer::context() const {
  ServingContext* context = context_.load();
  if (context == nullptr) throw ApiException({503, "the model is still loading", "service_unavailable", "", ""});
  return *context;
}

void HttpServer::add_routes() {
  // Bearer key on the OpenAI routes; health and metrics stay open for probes and scrapers.
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty() || req.path.rfind("/v1/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + options_.api_key) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(res, {401, "missing or wrong API key: send 'Authorization: Bearer <key>'", "authentication_error", "",
                     "invalid_api_key"});
    return httplib::Server::HandlerResponse::Handled;
  });
  // Statuses httplib decides itself (404 route, 413 body too large, 400 bad HTTP) get an
  // OpenAI error object too.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string message = res.status == 413   ? "request body too large"
                           : res.status == 404 ? "no route " + req.method + " " + req.path
                                               : "bad request";
    send_error(res, {res.status, message, res.status == 404 ? "not_found_error" : "invalid_request_error", "", ""});
  });
  http_->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const ApiException& e) {
      send_error(res, e.error());
    } catch (const std::exception& e) {
      send_error(res, {500, std::string("internal error: ") + e.what(), "internal_server_error", "", ""});
    } catch (...) {
      send_error(res, {500, "internal error", "internal_server_error", "", ""});
    }
  });
  add_generation_routes();
  add_info_routes();
}

void HttpServer::bind() {
  if (options_.port == 0) {
    bound_port_ = http_->bind_to_any_port(options_.host);
    TACHYON_CHECK(bound_port_ > 0) << "cannot bind to " << options_.host << " on any port";
  } else {
    TACHYON_CHECK(http_->bind_to_port(options_.host, options_.port))
        << "cannot bind to " << options_.host << ":" << options_.port << " (in use, or not an address of this host)";
    bound_port_ = options_.port;
  }
  if (listen_socket_ >= 0) ::listen(listen_socket_, 4096);  // on Linux a second listen() updates the backlog
}

void HttpServer::serve() { http_->listen_after_bind(); }

void HttpServer::shutdown() {
  if (context_.load() == nullptr) {  // still loading: nothing in flight
    http_->stop();
    return;
  }
  ServingContext& serving = context();
  serving.start_draining();
  const auto deadline = std::chrono::steady_clock::now() + options_.shutdown_timeout;
  while (std::chrono::steady_clock::now() < deadline && serving.engine().stats().num_active_requests > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  serving.engine().abort_all();
  // Let the aborted streams send their last frames before the listener closes.
  for (int i = 0; i < 100 && serving.engine().stats().num_active_requests > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  http_->stop();
}

}  // namespace tachyon::server
