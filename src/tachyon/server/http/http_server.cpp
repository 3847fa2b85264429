#include "tachyon/server/http/http_server.h"

#include <atomic>
#include <cstdio>
#include <thread>

#include "tachyon/server/http/http_listener.h"
#include "tachyon/server/http/http_routes.h"
#include "tachyon/server/http/http_util.h"
#include "tachyon/server/http/pd_roles.h"

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

HttpServer::HttpServer(HttpOptions options) : options_(std::move(options)), router_(std::make_unique<Router>()) {
  // Bearer key on the OpenAI routes; health and metrics stay open for probes and scrapers.
  router_->set_guard([this](const HttpRequest& request) -> std::optional<ApiError> {
    if (options_.api_key.empty() || request.header("Authorization") == "Bearer " + options_.api_key) {
      return std::nullopt;
    }
    return ApiError{401, "missing or wrong API key: send 'Authorization: Bearer <key>'", "authentication_error", "",
                    "invalid_api_key"};
  });
  ContextAccess access = [this]() -> ServingContext& { return context(); };
  add_generation_routes(*router_, access, options_.keepalive_interval);
  add_messages_routes(*router_, access, options_.keepalive_interval);
  add_responses_routes(*router_, access, options_.keepalive_interval);
  add_info_routes(*router_, access, [this] { return context_.load() != nullptr; });
  add_embeddings_routes(*router_, access);
  router_->add("GET", kPrefixHashesPath,  // http/pd_roles.h: a router's prefix policy reads it
               [access](const HttpRequest&, HttpResponse& res) { answer_prefix_hashes(access(), res); });
  listener_ = std::make_unique<HttpListener>(options_, *router_);
}

HttpServer::~HttpServer() = default;

ServingContext& HttpServer::context() const {
  ServingContext* context = context_.load();
  if (context == nullptr) throw ApiException({503, "the model is still loading", "service_unavailable", "", ""});
  return *context;
}

size_t HttpServer::open_connections() const { return listener_->open_connections(); }

void HttpServer::bind() { bound_port_ = listener_->bind(); }

void HttpServer::serve() { listener_->run(); }

void HttpServer::shutdown() {
  if (context_.load() == nullptr) {  // still loading: nothing in flight
    listener_->stop();
    return;
  }
  ServingContext& serving = context();
  serving.start_draining();
  serving.stop_kv_pulls();  // a request whose KV was still coming would be refused now anyway
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
  listener_->stop();
}

}  // namespace tachyon::server
