#include "tachyon/server/http/http_router.h"

#include <strings.h>

#include <memory>
#include <stdexcept>

namespace tachyon::server {

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (key.size() == name.size() && ::strncasecmp(key.data(), name.data(), name.size()) == 0) return value;
  }
  return "";
}

HttpResponse error_response(const ApiError& error, ErrorBodyFn body) {
  HttpResponse response;
  response.status = error.status;
  response.body = body(error);
  // Queue full, draining, too many connections: all pass; say when to come back.
  if (error.status == 503 || error.status == 429) response.headers.emplace_back("Retry-After", "1");
  return response;
}

HttpResponse exception_response(ErrorBodyFn body) {
  try {
    throw;
  } catch (const ApiException& e) {
    return error_response(e.error(), body);
  } catch (const std::exception& e) {
    return error_response({500, std::string("internal error: ") + e.what(), "internal_server_error", "", ""}, body);
  } catch (...) {
    return error_response({500, "internal error", "internal_server_error", "", ""}, body);
  }
}

void Router::add(std::string method, std::string path, HttpHandler handler, bool prefix, ErrorBodyFn error_body_fn) {
  routes_.push_back({std::move(method), std::move(path), prefix, std::move(handler), error_body_fn});
}

void Router::add_inline(std::string method, std::string path, HttpHandler handler) {
  routes_.push_back({std::move(method), std::move(path), false, std::move(handler), error_body, /*runs_inline=*/true});
}

void Router::add_async(std::string method, std::string path, AsyncHandler handler,
                       std::function<bool(const HttpRequest&)> when, ErrorBodyFn error_body_fn) {
  routes_.push_back(
      {std::move(method), std::move(path), false, nullptr, error_body_fn, false, std::move(handler), std::move(when)});
}

const Router::Route* Router::find(const HttpRequest& request) const {
  const std::string& method = request.method == "HEAD" ? std::string("GET") : request.method;
  for (const Route& r : routes_) {
    if (r.matches(request.path) && r.method == method) return &r;
  }
  return nullptr;
}

bool Router::runs_inline(const HttpRequest& request) const {
  const Route* route = find(request);
  return route != nullptr && route->runs_inline;
}

bool Router::runs_async(const HttpRequest& request) const {
  const Route* route = find(request);
  return route != nullptr && route->async_handler != nullptr && (!route->async_when || route->async_when(request));
}

std::optional<ApiError> Router::refusal(const HttpRequest& request) const {
  if (guard_ && request.path.rfind("/v1/", 0) == 0) return guard_(request);
  return std::nullopt;
}

bool Router::Route::matches(const std::string& request_path) const {
  if (!prefix) return request_path == path;
  return request_path.size() > path.size() && request_path.compare(0, path.size(), path) == 0;
}

HttpResponse Router::dispatch(const HttpRequest& request) const {
  const std::string& method = request.method == "HEAD" ? std::string("GET") : request.method;
  const Route* route = nullptr;
  std::string allowed;
  for (const Route& r : routes_) {
    if (!r.matches(request.path)) continue;
    if (r.method == method) {
      route = &r;
      break;
    }
    if (allowed.find(r.method) == std::string::npos) allowed += (allowed.empty() ? "" : ", ") + r.method;
  }
  if (route == nullptr && allowed.empty()) {
    return error_response({404, "no route " + request.method + " " + request.path, "not_found_error", "", ""});
  }
  if (route == nullptr) {
    HttpResponse response = error_response({405, "method " + request.method + " is not allowed on " + request.path +
                                                     "; use " + allowed,
                                            "invalid_request_error", "", "method_not_allowed"});
    response.headers.emplace_back("Allow", allowed);
    return response;
  }
  const ErrorBodyFn body = route->error_body_fn;
  try {
    if (std::optional<ApiError> refused = refusal(request)) return error_response(*refused, body);
    HttpResponse response;
    if (route->async_handler) {  // an async route's request that its `when` left to a worker
      auto answer = std::make_shared<std::optional<HttpResponse>>();
      route->async_handler(request, [answer](HttpResponse given) { *answer = std::move(given); });
      if (!*answer) throw std::logic_error("the route " + route->path + " did not answer before it returned");
      return std::move(**answer);
    }
    route->handler(request, response);
    return response;
  } catch (...) {
    return exception_response(body);
  }
}

void Router::dispatch(const HttpRequest& request, const Respond& respond) const {
  const Route* route = find(request);
  if (route == nullptr || route->async_handler == nullptr) return respond(dispatch(request));
  try {
    if (std::optional<ApiError> refused = refusal(request)) return respond(error_response(*refused, route->error_body_fn));
    route->async_handler(request, respond);
  } catch (...) {
    respond(exception_response(route->error_body_fn));
  }
}

}  // namespace tachyon::server
