#include "tachyon/server/http/pd_router.h"

#include <httplib.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "tachyon/base/check.h"
#include "tachyon/server/http/pd_roles.h"
#include "tachyon/server/pd_transport.h"

namespace tachyon::server {
namespace {

std::string error_json(const std::string& message, const std::string& type) {
  return nlohmann::json{{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}}}}.dump();
}

void unavailable(httplib::Response& res, const std::string& message) {
  res.status = 503;
  res.set_header("Retry-After", "1");
  res.set_content(error_json(message, "service_unavailable"), "application/json");
}

// The lease a prefill server granted, as the decode server's header names it.
struct Lease {
  std::string host;
  int kv_port = 0;
  engine::KvLeaseKey key;
  std::string header() const {
    return host + ":" + std::to_string(kv_port) + ":" + std::to_string(key.epoch) + ":" + std::to_string(key.request_id);
  }
};

std::unique_ptr<httplib::Client> client_of(const PdRouter::Backend& backend, std::chrono::seconds read_timeout) {
  auto client = std::make_unique<httplib::Client>(backend.host, backend.port);
  client->set_connection_timeout(std::chrono::seconds(2));
  client->set_read_timeout(read_timeout);
  client->set_write_timeout(std::chrono::seconds(10));
  return client;
}

}  // namespace

PdRouter::PdRouter(RouterOptions options) : options_(std::move(options)) {
  auto parse = [](const std::string& url, std::vector<std::unique_ptr<Backend>>& out) {
    std::string rest = url.rfind("http://", 0) == 0 ? url.substr(7) : url;
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    const size_t colon = rest.rfind(':');
    TACHYON_CHECK(colon != std::string::npos && colon > 0 && rest.find('/') == std::string::npos)
        << "router backend URL '" << url << "' is not http://host:port";
    auto backend = std::make_unique<Backend>();
    backend->url = url;
    backend->host = rest.substr(0, colon);
    try {
      backend->port = std::stoi(rest.substr(colon + 1));
    } catch (const std::exception&) {
      TACHYON_CHECK(false) << "router backend URL '" << url << "' has no port number";
    }
    out.push_back(std::move(backend));
  };
  for (const std::string& url : options_.prefill) parse(url, prefill_);
  for (const std::string& url : options_.decode) parse(url, decode_);
  TACHYON_CHECK(!prefill_.empty() && !decode_.empty()) << "the router needs at least one --prefill and one --decode URL";
  http_ = std::make_unique<httplib::Server>();
  http_->new_task_queue = [] { return new httplib::ThreadPool(64); };

  auto generate = [this](const httplib::Request& req, httplib::Response& res) {
    Backend* decode = pick(decode_, next_decode_);
    if (decode == nullptr) return unavailable(res, "no decode server is healthy; retry later");
    std::optional<Lease> lease;
    if (Backend* prefill = pick(prefill_, next_prefill_)) {
      auto answer = client_of(*prefill, std::chrono::seconds(300))->Post(req.path, req.body, "application/json");
      if (!answer) {
        prefill->healthy = false;  // the decode server computes the prompt
      } else if (answer->status >= 400 && answer->status < 500) {
        res.status = answer->status;
        res.set_content(answer->body, "application/json");
        return;
      } else if (answer->status == 200) {
        const auto json = nlohmann::json::parse(answer->body, nullptr, false);
        if (json.is_object() && json.contains("kv_transfer") && json["kv_transfer"].is_object()) {
          const auto& kv = json["kv_transfer"];
          lease = Lease{prefill->host, kv.value("port", 0),
                        {std::stoull(kv.value("epoch", std::string("0"))), kv.value("request_id", int64_t{0})}};
        }
      }
    }
    httplib::Headers headers;
    if (lease) headers.emplace(kKvSourceHeader, lease->header());
    const auto body = nlohmann::json::parse(req.body, nullptr, false);
    const bool stream = body.is_object() && body.value("stream", false);
    if (!stream) {
      auto answer = client_of(*decode, std::chrono::seconds(600))->Post(req.path, headers, req.body, "application/json");
      if (!answer) {
        decode->healthy = false;
        if (lease) release_kv_remote(lease->host, lease->kv_port, lease->key, std::chrono::seconds(1));
        return unavailable(res, "the decode server " + decode->url + " failed; retry");
      }
      res.status = answer->status;
      if (answer->has_header("Retry-After")) res.set_header("Retry-After", answer->get_header_value("Retry-After"));
      res.set_content(answer->body, answer->get_header_value("Content-Type"));
      return;
    }
    // Streamed: relay the decode server's SSE bytes as they come. A client that left makes
    // sink.write fail, which closes the decode connection (its request is aborted there).
    const std::string path = req.path;
    const std::string request_body = req.body;
    res.set_chunked_content_provider("text/event-stream", [decode, lease, headers, path, request_body](
                                                              size_t, httplib::DataSink& sink) {
      auto client = client_of(*decode, std::chrono::seconds(600));
      httplib::Request upstream;
      upstream.method = "POST";
      upstream.path = path;
      upstream.headers = headers;
      upstream.body = request_body;
      upstream.set_header("Content-Type", "application/json");
      bool relayed = false;
      bool client_gone = false;
      int status = 0;
      std::string refused;  // a non-200 answer's body
      upstream.response_handler = [&](const httplib::Response& r) {
        status = r.status;
        return true;
      };
      upstream.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
        if (status != 200) {
          refused.append(data, size);
          return true;
        }
        relayed = true;
        if (!sink.write(data, size)) {
          client_gone = true;
          return false;
        }
        return true;
      };
      httplib::Response response;
      httplib::Error error = httplib::Error::Success;
      const bool ok = client->send(upstream, response, error);
      if (!client_gone && (!ok || status != 200)) {
        if (!ok && !relayed) decode->healthy = false;
        if (!ok && !relayed && lease) release_kv_remote(lease->host, lease->kv_port, lease->key, std::chrono::seconds(1));
        const std::string why = status != 200 && status != 0 ? "the decode server answered " + std::to_string(status) +
                                                                   ": " + refused
                                                             : "the decode server " + decode->url + " failed mid-stream";
        const std::string frame = "data: " + error_json(why, "service_unavailable") + "\n\ndata: [DONE]\n\n";
        sink.write(frame.data(), frame.size());
      }
      if (!client_gone) sink.done();
      return !client_gone;
    });
  };
  http_->Post("/v1/completions", generate);
  http_->Post("/v1/chat/completions", generate);
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    for (const auto& d : decode_) {
      if (d->healthy) return res.set_content("{\"status\":\"ok\"}", "application/json");
    }
    unavailable(res, "no decode server is healthy");
  });
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    Backend* decode = pick(decode_, next_decode_);
    if (decode == nullptr) return unavailable(res, "no decode server is healthy; retry later");
    auto answer = client_of(*decode, std::chrono::seconds(10))->Get("/v1/models");
    if (!answer) return unavailable(res, "the decode server " + decode->url + " failed; retry");
    res.status = answer->status;
    res.set_content(answer->body, "application/json");
  });
}

PdRouter::~PdRouter() { stop(); }

PdRouter::Backend* PdRouter::pick(std::vector<std::unique_ptr<Backend>>& backends, std::atomic<uint64_t>& next) {
  const uint64_t start = next.fetch_add(1);
  for (size_t i = 0; i < backends.size(); ++i) {
    Backend* b = backends[(start + i) % backends.size()].get();
    if (b->healthy) return b;
  }
  return nullptr;
}

void PdRouter::check_health() {
  while (!stopping_) {
    for (auto* group : {&prefill_, &decode_}) {
      for (auto& backend : *group) {
        httplib::Client client(backend->host, backend->port);
        client.set_connection_timeout(std::chrono::seconds(1));
        client.set_read_timeout(std::chrono::seconds(2));
        auto answer = client.Get("/health");
        backend->healthy = answer && answer->status == 200;
      }
    }
    for (auto waited = std::chrono::milliseconds(0); waited < options_.health_interval && !stopping_;
         waited += std::chrono::milliseconds(50)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

int PdRouter::bind() {
  port_ = options_.port == 0 ? http_->bind_to_any_port(options_.host) : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  TACHYON_CHECK(port_ > 0) << "the router cannot listen on " << options_.host << ":" << options_.port;
  return port_;
}

void PdRouter::serve() {
  health_ = std::thread([this] { check_health(); });
  http_->listen_after_bind();
}

void PdRouter::stop() {
  stopping_ = true;
  if (http_) http_->stop();
  if (health_.joinable()) health_.join();
}

}  // namespace tachyon::server
