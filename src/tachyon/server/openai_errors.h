// OpenAI-style errors: what every bad request turns into, and the JSON body that carries it.
// The protocol layer throws ApiException; the HTTP layer catches it once and writes
// error_body(e.error()) with e.error().status. Nothing here knows about sockets.
//
// Body shape (OpenAI): {"error":{"message":...,"type":...,"param":...,"code":...}}; param and
// code are null when empty. Messages are made valid UTF-8 before they are written, because a
// message may quote the bytes that made the request invalid.
//
// Tests: tests/unit/test_openai_protocol_requests.cpp (ctest -R openai).
#pragma once

#include <exception>
#include <string>
#include <string_view>

namespace tachyon::server {

struct ApiError {
  int status = 400;                            // HTTP status
  std::string message;                         // what the user reads; says what to change
  std::string type = "invalid_request_error";  // OpenAI error type
  std::string param;                           // the offending field ("messages[2].role"); "" -> null
  std::string code;                            // machine-readable ("model_not_found"); "" -> null
};

class ApiException : public std::exception {
 public:
  explicit ApiException(ApiError e) : error_(std::move(e)) {}
  const ApiError& error() const { return error_; }
  const char* what() const noexcept override { return error_.message.c_str(); }

 private:
  ApiError error_;
};

// {"error":{"message","type","param","code"}} as compact JSON, always valid UTF-8.
std::string error_body(const ApiError& error);

// 400 invalid_request_error naming `param`.
ApiError bad_request(std::string param, std::string message);

// 404 for a request that names a model this server does not serve (code "model_not_found").
ApiError model_not_found(std::string_view requested, std::string_view served);

// `text` with every ill-formed UTF-8 sequence replaced by U+FFFD (as Python's
// bytes.decode(errors="replace") does, one replacement per maximal ill-formed subpart).
std::string to_valid_utf8(std::string_view text);

}  // namespace tachyon::server
