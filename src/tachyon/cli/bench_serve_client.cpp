// One streamed request over httplib (see bench_serve_client.h). A fresh httplib::Client per
// request: a load generator wants one connection per in-flight request, as vLLM's aiohttp
// session effectively has, and nothing shared between worker threads.
#include "tachyon/cli/bench_serve_client.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

#include "tachyon/base/check.h"

namespace tachyon::cli {
namespace {

using Json = nlohmann::json;

bool is_chat(const ServerTarget& target) {
  return target.endpoint.find("chat/completions") != std::string::npos;
}

// "http://host:port/prefix" -> {"http://host:port", "/prefix"}: httplib wants the two apart.
std::pair<std::string, std::string> split_url(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (path == std::string::npos) return {url, ""};
  std::string prefix = url.substr(path);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  return {url.substr(0, path), prefix};
}

httplib::Headers headers(const ServerTarget& target) {
  httplib::Headers h;
  if (!target.api_key.empty()) h.emplace("Authorization", "Bearer " + target.api_key);
  return h;
}

// A chat stream opens with a role-only delta; it is no token, so it does not stop the TTFT clock.
// A forced tool call's tokens come as delta.tool_calls.
bool carries_output(const Json& choice) {
  const auto delta = choice.find("delta");
  if (delta == choice.end() || !delta->is_object()) return true;  // completions: every chunk
  const auto content = delta->find("content");
  const bool has_content = content != delta->end() && content->is_string() && !content->get_ref<const std::string&>().empty();
  const auto finish = choice.find("finish_reason");
  return has_content || delta->contains("reasoning_content") || delta->contains("tool_calls") ||
         (finish != choice.end() && !finish->is_null());
}

// The chunk's text: completions' text, chat's content, or tool-call argument fragments.
void append_text(const Json& choice, std::string& out) {
  if (const auto text = choice.find("text"); text != choice.end() && text->is_string()) out += text->get<std::string>();
  const auto delta = choice.find("delta");
  if (delta == choice.end() || !delta->is_object()) return;
  if (const auto content = delta->find("content"); content != delta->end() && content->is_string()) {
    out += content->get<std::string>();
  }
  if (const auto calls = delta->find("tool_calls"); calls != delta->end() && calls->is_array()) {
    for (const Json& call : *calls) {
      const Json arguments = call.value("function", Json::object()).value("arguments", Json());
      if (arguments.is_string()) out += arguments.get<std::string>();
    }
  }
}

}  // namespace

std::vector<std::string> SseParser::feed(std::string_view bytes) {
  std::vector<std::string> events;
  for (char c : bytes) {
    if (c != '\n') {
      line_ += c;
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.empty()) {  // blank line: the event is complete
      if (has_data_) events.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
    } else if (line_.rfind("data:", 0) == 0) {
      std::string_view value(line_);
      value.remove_prefix(5);
      if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
      if (has_data_) data_ += '\n';
      data_ += value;
      has_data_ = true;
    }
    line_.clear();
  }
  return events;
}

bool StreamTimer::on_payload(const std::string& payload, double t) {
  if (payload == "[DONE]") return false;
  Json chunk = Json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    outcome_.error = "unparsable stream chunk: " + payload.substr(0, 200);
    return false;
  }
  if (chunk.contains("error")) {
    const Json& e = chunk["error"];
    outcome_.error = e.is_object() && e.contains("message") ? e["message"].dump() : e.dump();
    return false;
  }
  const auto choices = chunk.find("choices");
  if (choices != chunk.end() && choices->is_array() && !choices->empty()) append_text(choices->front(), outcome_.generated_text);
  if (choices != chunk.end() && choices->is_array() && !choices->empty() && carries_output(choices->front())) {
    if (chunks_ == 0) {
      outcome_.ttft = t;
    } else {
      outcome_.itl.push_back(t - last_);
    }
    last_ = t;
    ++chunks_;
  }
  const auto usage = chunk.find("usage");
  if (usage != chunk.end() && usage->is_object()) {
    usage_seen_ = true;
    outcome_.prompt_tokens = usage->value("prompt_tokens", int64_t{0});
    outcome_.output_tokens = usage->value("completion_tokens", int64_t{0});
    const auto details = usage->find("prompt_tokens_details");
    if (details != usage->end() && details->is_object()) outcome_.cached_tokens = details->value("cached_tokens", int64_t{0});
  }
  return true;
}

void StreamTimer::finish(int64_t dataset_prompt_len) {
  if (!usage_seen_) {
    outcome_.prompt_tokens = dataset_prompt_len;
    outcome_.output_tokens = chunks_;
  }
  if (outcome_.prompt_tokens <= 0) outcome_.prompt_tokens = dataset_prompt_len;
  outcome_.latency = last_;
  if (outcome_.error.empty() && chunks_ == 0) outcome_.error = "the stream ended without any output chunk";
  outcome_.success = outcome_.error.empty();
}

std::string request_body(const ServerTarget& target, const BenchRequest& request, bool ignore_eos) {
  Json body = {{"model", target.model},
               {"temperature", 0.0},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (is_chat(target)) {
    TACHYON_CHECK(request.prompt_ids.empty()) << "a chat endpoint takes text: use --prompt-format text";
    body["messages"] = Json::array({{{"role", "user"}, {"content", request.prompt_text}}});
    body["max_completion_tokens"] = request.output_len;
  } else {
    if (request.prompt_ids.empty()) {
      body["prompt"] = request.prompt_text;
    } else {
      body["prompt"] = request.prompt_ids;
    }
    body["max_tokens"] = request.output_len;
  }
  for (const auto& [key, value] : target.extra_fields.items()) body[key] = value;
  if (ignore_eos) {
    body["ignore_eos"] = true;
    body["min_tokens"] = request.output_len;  // as vLLM: the output length is then exact
  }
  return body.dump();
}

RequestOutcome send_request(const ServerTarget& target, const BenchRequest& request, bool ignore_eos) {
  RequestOutcome outcome;
  StreamTimer timer(outcome);
  SseParser parser;
  const auto [host, prefix] = split_url(target.base_url);
  httplib::Client client(host);
  client.set_connection_timeout(std::chrono::seconds(10));
  client.set_read_timeout(std::chrono::hours(6));

  httplib::Request req;
  req.method = "POST";
  req.path = prefix + target.endpoint;
  req.headers = headers(target);
  req.body = request_body(target, request, ignore_eos);
  req.set_header("Content-Type", "application/json");
  int status = 0;
  std::string error_body;
  bool open = true;
  const auto start = std::chrono::steady_clock::now();
  req.response_handler = [&](const httplib::Response& res) {
    status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (status != 200) {
      error_body.append(data, n);
      return true;
    }
    for (const std::string& payload : parser.feed(std::string_view(data, n))) {
      if (open) open = timer.on_payload(payload, t);
    }
    return true;
  };
  httplib::Result result = client.send(req);
  if (!result) {
    outcome.error = "HTTP client error: " + httplib::to_string(result.error());
  } else if (status != 200) {
    outcome.error = "HTTP " + std::to_string(status) + ": " + error_body.substr(0, 500);
  }
  timer.finish(request.prompt_len);
  return outcome;
}

ServedModel served_model(const ServerTarget& target) {
  const auto [host, prefix] = split_url(target.base_url);
  httplib::Client client(host);
  client.set_connection_timeout(std::chrono::seconds(10));
  httplib::Result res = client.Get(prefix + "/v1/models", headers(target));
  TACHYON_CHECK(res) << "cannot reach " << target.base_url << "/v1/models (" << httplib::to_string(res.error()) << " error)"
                     << " (is the server up? pass --model and --vocab-size to skip this)";
  TACHYON_CHECK(res->status == 200) << "GET " << target.base_url << "/v1/models answered " << res->status << ": "
                                    << res->body.substr(0, 300);
  Json models = Json::parse(res->body, nullptr, false);
  TACHYON_CHECK(!models.is_discarded() && models.contains("data") && models["data"].is_array())
      << "GET /v1/models answered no model list; pass --model";
  ServedModel served{.id = target.model};
  for (const Json& card : models["data"]) {
    if (!card.is_object() || !card.contains("id") || !card["id"].is_string()) continue;
    if (!target.model.empty() && card["id"] != target.model) continue;
    served.id = card["id"].get<std::string>();
    const auto vocab = card.find("vocab_size");
    if (vocab != card.end() && vocab->is_number_integer()) served.vocab_size = std::max<int64_t>(0, vocab->get<int64_t>());
    break;
  }
  TACHYON_CHECK(!served.id.empty()) << "GET /v1/models listed no model; pass --model";
  return served;
}

std::optional<std::string> server_metrics_text(const ServerTarget& target) {
  const auto [host, prefix] = split_url(target.base_url);
  httplib::Client client(host);
  client.set_connection_timeout(std::chrono::seconds(10));
  client.set_read_timeout(std::chrono::seconds(30));
  httplib::Result res = client.Get("/metrics", headers(target));
  if (!res || res->status != 200) return std::nullopt;
  return res->body;
}

}  // namespace tachyon::cli
