// Small helpers shared by the route files: JSON responses, request ids, URL decoding.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "tachyon/server/http/http_message.h"
#include "tachyon/server/http/http_router.h"
#include "tachyon/server/openai_errors.h"

namespace tachyon::server {

inline void send_json(HttpResponse& res, int status, std::string body) {
  res.status = status;
  res.content_type = "application/json";
  res.body = std::move(body);
}

inline void send_error(HttpResponse& res, const ApiError& error) { res = error_response(error); }

// "cmpl-<hex>" style ids, unique per process.
std::string make_request_id(const char* prefix);

// %XX escapes decoded ("/v1/models/a%2Fb" -> "a/b"); a malformed escape stays as sent. In a query
// (plus_is_space), '+' is a space too.
std::string percent_decoded(std::string_view text, bool plus_is_space = false);

// A query's parameters (name=value&..., decoded; a name without '=' has the value "").
std::map<std::string, std::string> query_parameters(std::string_view query);

}  // namespace tachyon::server
