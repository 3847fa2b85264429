// An in-process server on a free port over a tiny Qwen3 model with the real Qwen3 tokenizer,
// and an httplib client to talk to it. One per test suite; tests reach the engine's stats
// directly to check what the server did behind the HTTP answers.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <httplib.h>
#include <unistd.h>

#include <functional>
#include <thread>

#include "tachyon/model/make_model.h"
#include "tachyon/server/http/http_server.h"

namespace tachyon::server::testing {

struct ServerUnderTest {
  // max_sequences_per_client: ServingOptions' (0: its default share, -1: none). `adjust` may
  // change the options and add files to the model directory (options.model_dir) before loading.
  explicit ServerUnderTest(core::EngineConfig engine = default_engine(), HttpOptions http = {},
                           int64_t max_sequences_per_client = 0,
                           const std::function<void(ServingOptions&)>& adjust = nullptr) {
    dir = std::filesystem::temp_directory_path() / ("tachyon-server-" + std::to_string(::getpid()) + "-" +
                                                   std::to_string(reinterpret_cast<uintptr_t>(this)));
    model::make_model({.arch = "qwen3",
                       .preset = "tiny",
                       .seed = 5,
                       .tokenizer_dir = std::filesystem::path(TACHYON_TOKENIZERS) / "qwen3",
                       .out_dir = dir});
    ServingOptions options;
    options.model_dir = dir;
    options.served_model_name = "tiny";
    options.engine = engine;
    options.max_sequences_per_client = max_sequences_per_client;
    if (adjust) adjust(options);
    context = std::make_unique<ServingContext>(options);
    http.port = 0;
    server = std::make_unique<HttpServer>(*context, http);
    server->bind();
    thread = std::thread([this] { server->serve(); });
  }
  ~ServerUnderTest() {
    server->shutdown();
    thread.join();
    server.reset();
    context.reset();
    std::filesystem::remove_all(dir);
  }
  static core::EngineConfig default_engine() {
    core::EngineConfig c;
    c.scheduler.policy = core::SchedulingPolicy::kFair;  // `tachyon serve`'s default
    c.scheduler.max_model_len = 512;
    c.num_blocks = 256;
    c.block_size = 16;
    return c;
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", server->bound_port());
    c.set_read_timeout(std::chrono::seconds(60));
    return c;
  }
  // Waits until the engine holds no request (the last step's cleanup is asynchronous).
  bool wait_idle(std::chrono::milliseconds limit = std::chrono::seconds(10)) const {
    auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      auto s = context->engine().stats();
      if (s.num_active_requests == 0 && s.num_running == 0 && s.num_waiting == 0 && s.kv_blocks_free == s.kv_blocks_total) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  std::filesystem::path dir;
  std::unique_ptr<ServingContext> context;
  std::unique_ptr<HttpServer> server;
  std::thread thread;
};

// Collects the `data:` payloads of an SSE body.
inline std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t end = body.find("\n\n", pos);
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

// A tool schema the engine cannot follow: every '[' doubles the parses still open (an item is an
// `a` or a `b`, both arrays), past the parser's budget within a few tokens. A forced call of it is
// an answer the engine gives up on (a 400 saying why, or an error event).
inline nlohmann::json ambiguous_schema() {
  using nlohmann::json;
  const json items = {{"anyOf", json::array({{{"$ref", "#/$defs/a"}}, {{"$ref", "#/$defs/b"}}})}};
  const json array = {{"type", "array"}, {"items", items}, {"minItems", 1}};
  return {{"type", "object"},
          {"properties", {{"x", {{"$ref", "#/$defs/a"}}}}},
          {"required", json::array({"x"})},
          {"$defs", {{"a", array}, {"b", array}}}};
}

// One event of an SSE body whose frames are "event: <name>\ndata: <json>" (the Anthropic Messages
// and Responses APIs): its name and data; each frame's shape and its data's "type" = name are
// checked as it is read.
struct NamedSseEvent {
  std::string name;
  nlohmann::json data;
};
inline std::vector<NamedSseEvent> named_sse_events(const std::string& body) {
  std::vector<NamedSseEvent> events;
  for (size_t pos = 0, end; (end = body.find("\n\n", pos)) != std::string::npos; pos = end + 2) {
    const std::string frame = body.substr(pos, end - pos);
    const size_t line_end = frame.find('\n');
    EXPECT_EQ(frame.rfind("event: ", 0), 0u) << frame;
    EXPECT_EQ(frame.compare(line_end + 1, 6, "data: "), 0) << frame;
    NamedSseEvent event{frame.substr(7, line_end - 7), nlohmann::json::parse(frame.substr(line_end + 7))};
    EXPECT_EQ(event.data["type"], event.name);
    events.push_back(std::move(event));
  }
  return events;
}

}  // namespace tachyon::server::testing
