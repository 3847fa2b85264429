// What the abuse tests share: raw-socket exchanges (raw_http.h) turned into the checks they all
// make (an OpenAI error body, /health within a second, a metric's value), the full-run switch,
// and one default server per suite. Header-only; each abuse test file includes it.
#pragma once

#include <gtest/gtest.h>
#include <sys/epoll.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "raw_http.h"
#include "server_fixture.h"

namespace tachyon::server::testing {

using nlohmann::json;
using namespace std::chrono_literals;


using nlohmann::json;
using namespace std::chrono_literals;

inline bool full_run() {
  const char* full = std::getenv("TACHYON_ABUSE_FULL");
  return full != nullptr && std::string(full) == "1";
}

inline double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// `bytes` with control and high bytes escaped and cut to `max`, for failure messages.
inline std::string printable(std::string_view bytes, size_t max = 300) {
  std::string out;
  for (unsigned char ch : bytes.substr(0, max)) {
    if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch < 0x20 || ch >= 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", ch);
      out += escaped;
    } else {
      out += static_cast<char>(ch);
    }
  }
  if (bytes.size() > max) out += "... (" + std::to_string(bytes.size()) + " bytes)";
  return out;
}

// What every error answer carries: {"error":{"message","type","param","code"}}.
inline ::testing::AssertionResult is_openai_error(const RawResponse& r) {
  json body = json::parse(r.body, nullptr, false);
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    const json& e = body["error"];
    if (e.contains("message") && e["message"].is_string() && e.contains("type") && e["type"].is_string() &&
        e.contains("param") && e.contains("code")) {
      return ::testing::AssertionSuccess();
    }
  }
  return ::testing::AssertionFailure() << "status " << r.status
                                       << " without an OpenAI error body: " << printable(r.body);
}

// One request on a fresh connection, and its answer.
inline ReadResult exchange(int port, std::string_view request, RawResponse& out, Clock::duration limit = 20s) {
  RawConnection c(port);
  if (!c.connected()) return ReadResult::kClosed;
  c.send(request);  // a refusal may close before the whole request is out: the answer decides
  return c.read_response(out, limit);
}

// GET /health on a fresh connection answers 200 within `limit`.
inline bool health_ok(int port, Clock::duration limit = 1s) {
  RawResponse r;
  return exchange(port, http_request("GET", "/health"), r, limit) == ReadResult::kResponse && r.status == 200;
}

// The value of one series in GET /metrics (full name with labels); -1 when absent.
inline double metric_value(int port, const std::string& series) {
  RawResponse r;
  if (exchange(port, http_request("GET", "/metrics"), r) != ReadResult::kResponse || r.status != 200) return -1;
  size_t at = r.body.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(r.body.substr(at + series.size() + 2));
}

// The concatenated choices[0].text of an SSE completion body.
inline std::string streamed_completion_text(const std::string& body) {
  std::string text;
  for (const std::string& frame : sse_payloads(body)) {
    if (frame == "[DONE]") break;
    json chunk = json::parse(frame);
    if (!chunk["choices"].empty()) text += chunk["choices"][0]["text"].get<std::string>();
  }
  return text;
}

// One server with the default options per test suite that derives from this.
class ServerAbuseHttp : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new ServerUnderTest(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static int port() { return server_->server->bound_port(); }
  static ServerUnderTest* server_;
};
inline ServerUnderTest* ServerAbuseHttp::server_ = nullptr;

}  // namespace tachyon::server::testing
