// Small helpers shared by the route files: JSON responses and request ids.
#pragma once

#include <string>

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

}  // namespace tachyon::server
