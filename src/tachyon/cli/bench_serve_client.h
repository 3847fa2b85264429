// One streamed request of `bench serve`, timed as vLLM times it: TTFT at the first chunk that
// carries choices, an ITL sample between each later such chunk, E2E at the last one; the
// output token count from the final usage chunk (fallback: the number of chunks). The SSE
// parser is separate so that a test can feed it bytes split at odd places.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tachyon/cli/bench_serve_dataset.h"

namespace tachyon::cli {

// Server-sent events: bytes in, the `data:` payload of each complete event out. Lines may end
// with \n or \r\n; an event ends at a blank line; comments and other fields are skipped.
class SseParser {
 public:
  std::vector<std::string> feed(std::string_view bytes);

 private:
  std::string line_;   // the incomplete line so far
  std::string data_;   // the current event's data lines, joined by \n
  bool has_data_ = false;
};

struct ServerTarget {
  std::string base_url = "http://127.0.0.1:8000";  // scheme://host:port
  std::string endpoint = "/v1/completions";       // or /v1/chat/completions (text prompts only)
  std::string model;
  std::string api_key;  // sent as a Bearer token when set
  // Fields added to every request body (bench_serve_structured.h: response_format, tools,
  // tool_choice); an empty object adds none.
  nlohmann::ordered_json extra_fields = nlohmann::ordered_json::object();
};

struct RequestOutcome {
  bool success = false;
  std::string error;             // why it failed; empty on success
  double ttft = 0;               // seconds from send to the first chunk with choices
  double latency = 0;            // seconds from send to the last chunk with choices
  std::vector<double> itl;       // seconds between consecutive chunks with choices
  int64_t prompt_tokens = 0;     // from usage; the dataset's length when the server gives none
  int64_t output_tokens = 0;     // from usage; the chunk count when the server gives none
  int64_t cached_tokens = 0;     // of prompt_tokens, served from the prefix cache (usage's prompt_tokens_details)
  // The streamed text: completions' text, chat's content, and a tool call's argument
  // fragments (vLLM's generated_texts), so a constrained run's outputs can be checked.
  std::string generated_text;
};

// Applies one SSE payload received `t` seconds after the send to the outcome being built.
// Returns false once the stream is over ([DONE]) or broken (an error payload).
class StreamTimer {
 public:
  explicit StreamTimer(RequestOutcome& outcome) : outcome_(outcome) {}
  bool on_payload(const std::string& payload, double t);
  // Settles success, the token counts and the error of a stream that has ended.
  void finish(int64_t dataset_prompt_len);

 private:
  RequestOutcome& outcome_;
  int64_t chunks_ = 0;
  double last_ = 0;
  bool usage_seen_ = false;
};

// The JSON body vLLM's benchmark sends for this request (stream, usage, greedy, max_tokens).
std::string request_body(const ServerTarget& target, const BenchRequest& request, bool ignore_eos);

// Sends one request and reads its stream to the end; never throws.
RequestOutcome send_request(const ServerTarget& target, const BenchRequest& request, bool ignore_eos);

// What GET /v1/models says about the model under test.
struct ServedModel {
  std::string id;
  int64_t vocab_size = 0;  // the card's vocab_size (tachyon publishes it); 0: not given
};

// The card of target.model in GET /v1/models, or the first card when target.model is empty (a
// named model the list lacks keeps its name, without a vocab_size). Throws tachyon::Error with
// the reason when the server cannot be asked or lists no model.
ServedModel served_model(const ServerTarget& target);

// GET /metrics of the server (at the root of target.base_url's host); nullopt when it cannot be
// read (no such route, the server unreachable). Never throws.
std::optional<std::string> server_metrics_text(const ServerTarget& target);

}  // namespace tachyon::cli
