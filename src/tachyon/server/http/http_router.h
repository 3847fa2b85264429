// Router: (method, path) -> handler, and the answers no handler gives: 404 for an unknown path,
// 405 with `Allow` for a known path asked with another method, the API-key check, and every
// exception turned into an OpenAI-style error body (ApiException keeps its status; anything
// else is a 500 that names the fault). 503 answers carry Retry-After.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tachyon/server/http/http_message.h"
#include "tachyon/server/openai_errors.h"

namespace tachyon::server {

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;
// The answer to a request, given once, from any thread, whenever it is ready.
using Respond = std::function<void(HttpResponse)>;
// A handler that answers later through `respond` and returns at once, so that no worker waits
// while its answer is being made elsewhere (the router's proxying). It reads the request only
// during the call (copy what the answer needs), and throws only before it hands `respond` on.
using AsyncHandler = std::function<void(const HttpRequest&, Respond respond)>;
// An error's JSON body: OpenAI's shape (error_body) unless a route speaks another protocol.
using ErrorBodyFn = std::string (*)(const ApiError&);

// The response that carries `error`: its status, its JSON body, Retry-After on a 503.
HttpResponse error_response(const ApiError& error, ErrorBodyFn body = error_body);
// Inside a catch block: the answer to the exception being handled (an ApiException keeps its
// status; anything else is a 500 that names the fault).
HttpResponse exception_response(ErrorBodyFn body = error_body);

class Router {
 public:
  // `path` is matched exactly; a path ending in '/' with `prefix` set matches anything under it
  // (the handler reads the rest from request.path).
  // `error_body_fn` writes the body of every error this route answers (the guard's included).
  void add(std::string method, std::string path, HttpHandler handler, bool prefix = false,
           ErrorBodyFn error_body_fn = error_body);
  // A route whose handler answers at once and never waits (a router's /metrics and /health): the
  // connection runs it on its own I/O thread, so it never queues behind busy workers.
  void add_inline(std::string method, std::string path, HttpHandler handler);
  bool runs_inline(const HttpRequest& request) const;  // the request's route was added so
  // A route whose handler answers later (see AsyncHandler); its connection reads while it waits,
  // so a client that hangs up meanwhile is let go at once. With `when`, only the requests it
  // holds for run so; the others run on a worker as any route's, and the handler must answer
  // them before it returns (a decode server's generation routes: only a KV pull answers later).
  void add_async(std::string method, std::string path, AsyncHandler handler,
                 std::function<bool(const HttpRequest&)> when = nullptr, ErrorBodyFn error_body_fn = error_body);
  bool runs_async(const HttpRequest& request) const;  // the request's route was added so
  // Runs before any handler of a path under /v1/; an error it returns is the answer.
  void set_guard(std::function<std::optional<ApiError>(const HttpRequest&)> guard) { guard_ = std::move(guard); }

  // Never throws.
  HttpResponse dispatch(const HttpRequest& request) const;
  // Never throws; `respond` is called once: before this returns, unless the route is async.
  void dispatch(const HttpRequest& request, const Respond& respond) const;

 private:
  struct Route {
    std::string method;
    std::string path;
    bool prefix = false;
    HttpHandler handler;
    ErrorBodyFn error_body_fn = error_body;
    bool runs_inline = false;
    AsyncHandler async_handler;  // set: the route answers later (add_async)
    std::function<bool(const HttpRequest&)> async_when;  // set: only the requests it holds for do
    bool matches(const std::string& request_path) const;
  };
  const Route* find(const HttpRequest& request) const;  // the route of that method and path, or null
  std::optional<ApiError> refusal(const HttpRequest& request) const;  // the guard's, on /v1/*

  std::vector<Route> routes_;
  std::function<std::optional<ApiError>(const HttpRequest&)> guard_;
};

}  // namespace tachyon::server
