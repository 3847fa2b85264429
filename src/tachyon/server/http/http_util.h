// Small helpers shared by the route files: JSON/error responses and the API-key check.
#pragma once

#include <httplib.h>

#include <string>

#include <nlohmann/json.hpp>

#include "tachyon/server/openai_errors.h"

namespace tachyon::server {

inline void send_json(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "application/json");
}

inline void send_error(httplib::Response& res, const ApiError& error) { send_json(res, error.status, error_body(error)); }

// "cmpl-<hex>" style ids, unique per process.
std::string make_request_id(const char* prefix);

}  // namespace tachyon::server
