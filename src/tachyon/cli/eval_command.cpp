// tachyon eval: few-shot exact-match accuracy of any OpenAI-compatible server on a JSONL task of
// {"question", "answer": "...#### N"} records, as lm-eval-harness's gsm8k task measures it
// (prompt, stop strings, strict and flexible extraction: eval_scoring.h). Greedy completions go
// through POST /v1/completions from a pool of --concurrency threads, one httplib client each; a
// connection error is retried twice, an HTTP error is not (the server answered; retrying would
// hide it). A failed request scores as wrong and makes the command exit 1 after the report, so a
// canary run in CI cannot pass on a half-broken server. Docs: docs/eval.md.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tachyon/base/check.h"
#include "tachyon/cli/commands.h"
#include "tachyon/cli/unescape.h"
#include "tachyon/eval/eval_scoring.h"

namespace tachyon::cli {
using namespace eval;  // the scoring logic lives in src/tachyon/eval/

namespace {

struct EvalOptions {
  std::string base_url = "http://127.0.0.1:8000";
  std::string model;  // empty: the first id of GET /v1/models
  std::string api_key;
  std::string dataset;
  std::string few_shot_from;  // empty: the dataset's first --few-shot records
  int64_t few_shot = 5;
  int64_t limit = 0;
  int32_t max_tokens = 256;
  int32_t concurrency = 16;
  double temperature = 0.0;
  std::vector<std::string> stop = {"Question:", "\n\n"};
  std::string output_json;
  bool no_progress = false;
  std::string command_line;
};

// A generation on a busy CPU server can take minutes; the read timeout only guards against a hang.
constexpr int kReadTimeoutS = 600;
constexpr int kConnectTimeoutS = 10;
constexpr int kConnectRetries = 2;

// "http://host:port[/prefix][/v1]" -> the origin httplib connects to and the path prefix that
// "/v1/..." is appended to (a trailing "/v1" is accepted, as OpenAI clients' base URLs carry it).
struct Endpoint {
  std::string origin;
  std::string prefix;
};

Endpoint parse_base_url(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
  const size_t scheme = url.find("://");
  const size_t path = url.find('/', scheme == std::string::npos ? 0 : scheme + 3);
  if (path == std::string::npos) return {url, ""};
  return {url.substr(0, path), url.substr(path)};
}

std::unique_ptr<httplib::Client> make_client(const EvalOptions& options, const Endpoint& endpoint) {
  auto client = std::make_unique<httplib::Client>(endpoint.origin);
  TACHYON_CHECK(client->is_valid()) << "--base-url " << options.base_url << " is not a URL this build can reach";
  client->set_connection_timeout(kConnectTimeoutS);
  client->set_read_timeout(kReadTimeoutS);
  client->set_write_timeout(kReadTimeoutS);
  if (!options.api_key.empty()) client->set_bearer_token_auth(options.api_key);
  return client;
}

std::string first_model_id(httplib::Client& client, const Endpoint& endpoint, const std::string& base_url) {
  httplib::Result res = client.Get(endpoint.prefix + "/v1/models");
  TACHYON_CHECK(res) << "cannot reach " << base_url << ": " << httplib::to_string(res.error());
  TACHYON_CHECK(res->status == 200) << "GET /v1/models answered HTTP " << res->status << ": " << res->body;
  nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
  TACHYON_CHECK(j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
                j["data"][0].contains("id") && j["data"][0]["id"].is_string())
      << "GET /v1/models lists no model; pass --model";
  return j["data"][0]["id"].get<std::string>();
}

struct EvalCompletion {
  std::string text;
  std::string error;  // non-empty: failed
  double latency_s = 0;
};

// One POST /v1/completions, retried on connection errors only; latency of the successful attempt.
EvalCompletion complete(httplib::Client& client, const Endpoint& endpoint, const std::string& body) {
  EvalCompletion out;
  for (int attempt = 0; attempt <= kConnectRetries; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(250 * attempt));
    const auto begin = std::chrono::steady_clock::now();
    httplib::Result res = client.Post(endpoint.prefix + "/v1/completions", body, "application/json");
    out.latency_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (!res) {
      out.error = "connection error: " + httplib::to_string(res.error());
      continue;
    }
    if (res->status != 200) {
      out.error = "HTTP " + std::to_string(res->status) + ": " + res->body;
      return out;
    }
    nlohmann::json j = nlohmann::json::parse(res->body, nullptr, false);
    if (!j.is_object() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty() ||
        !j["choices"][0].contains("text") || !j["choices"][0]["text"].is_string()) {
      out.error = "unexpected response: " + res->body.substr(0, 200);
      return out;
    }
    out.text = j["choices"][0]["text"].get<std::string>();
    out.error.clear();
    return out;
  }
  return out;
}

// "\r[eval] 12/100  strict 0.083  flexible 0.167  3.1 req/s" on a terminal, at most 10 times a second.
class ProgressLine {
 public:
  ProgressLine(size_t total, bool enabled) : total_(total), enabled_(enabled), begin_(std::chrono::steady_clock::now()) {}
  void add(const EvalSample& s) {
    std::lock_guard<std::mutex> lock(mu_);
    ++done_;
    strict_ += s.strict_correct ? 1 : 0;
    flexible_ += s.flexible_correct ? 1 : 0;
    failed_ += s.error.empty() ? 0 : 1;
    const auto now = std::chrono::steady_clock::now();
    if (!enabled_ || (done_ < total_ && now - last_ < std::chrono::milliseconds(100))) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - begin_).count();
    std::fprintf(stderr, "\r[eval] %zu/%zu  strict %.3f  flexible %.3f  failed %zu  %.1f req/s%s", done_, total_,
                 static_cast<double>(strict_) / done_, static_cast<double>(flexible_) / done_, failed_,
                 elapsed > 0 ? done_ / elapsed : 0.0, done_ == total_ ? "\n" : "");
    std::fflush(stderr);
  }

 private:
  std::mutex mu_;
  size_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point begin_, last_;
  size_t done_ = 0, strict_ = 0, flexible_ = 0, failed_ = 0;
};

// Sends every scored record's prompt from the worker pool; results in dataset order.
std::vector<EvalSample> run_requests(const EvalOptions& options, const Endpoint& endpoint, const std::string& model,
                                     const std::vector<EvalRecord>& dataset, const EvalSplit& split) {
  std::vector<EvalSample> samples(split.scored.size());
  ProgressLine progress(samples.size(), !options.no_progress && ::isatty(STDERR_FILENO));
  const size_t threads = std::min<size_t>(static_cast<size_t>(options.concurrency), samples.size());
  std::vector<std::unique_ptr<httplib::Client>> clients;  // made here: a worker must not throw
  for (size_t t = 0; t < threads; ++t) clients.push_back(make_client(options, endpoint));
  // Every field but the prompt, dumped once here so that a bad byte in --stop fails before any thread.
  const nlohmann::json request = {{"model", model},
                                  {"max_tokens", options.max_tokens},
                                  {"temperature", options.temperature},
                                  {"stop", options.stop}};
  (void)request.dump();
  std::atomic<size_t> next{0};
  auto worker = [&](httplib::Client* client) {
    for (size_t i = next++; i < samples.size(); i = next++) {
      const EvalRecord& record = dataset[static_cast<size_t>(split.scored[i])];
      nlohmann::json body = request;
      body["prompt"] = build_prompt(split.shots, record.question);
      EvalCompletion c = complete(*client, endpoint, body.dump());
      EvalSample& s = samples[i];
      s = score_completion(split.scored[i], gold_answer(record.answer), c.text);
      s.latency_s = c.latency_s;
      s.error = c.error;
      if (!s.error.empty()) s.strict_correct = s.flexible_correct = false;
      progress.add(s);
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) pool.emplace_back(worker, clients[t].get());
  for (std::thread& t : pool) t.join();
  return samples;
}

nlohmann::ordered_json sample_json(const EvalSample& s) {
  auto optional = [](const std::optional<std::string>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); };
  nlohmann::ordered_json j = {{"index", s.index},
                              {"gold", s.gold},
                              {"completion", s.completion},
                              {"strict", optional(s.strict)},
                              {"flexible", optional(s.flexible)},
                              {"strict_correct", s.strict_correct},
                              {"flexible_correct", s.flexible_correct},
                              {"latency_s", s.latency_s}};
  if (!s.error.empty()) j["error"] = s.error;
  return j;
}

void run_eval(EvalOptions options) {
  for (std::string& s : options.stop) s = unescape(s);
  const std::vector<EvalRecord> dataset = read_eval_records(options.dataset);
  std::vector<EvalRecord> shot_file;
  if (!options.few_shot_from.empty()) shot_file = read_eval_records(options.few_shot_from);
  const EvalSplit split =
      split_eval_records(dataset, options.few_shot_from.empty() ? nullptr : &shot_file, options.few_shot, options.limit);
  for (int64_t i : split.scored) gold_answer(dataset[static_cast<size_t>(i)].answer);  // bad gold fails before any request

  const Endpoint endpoint = parse_base_url(options.base_url);
  std::string model = options.model;
  if (model.empty()) model = first_model_id(*make_client(options, endpoint), endpoint, options.base_url);

  const auto begin = std::chrono::steady_clock::now();
  std::vector<EvalSample> samples = run_requests(options, endpoint, model, dataset, split);
  const double duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  const EvalSummary summary = summarize_eval(samples);

  std::printf("eval: %s, %lld samples, %lld-shot, model %s at %s\n", options.dataset.c_str(),
              static_cast<long long>(summary.samples), static_cast<long long>(options.few_shot), model.c_str(),
              options.base_url.c_str());
  std::printf("  strict-match      %.4f  (%lld/%lld)\n", summary.strict_accuracy,
              static_cast<long long>(summary.strict_correct), static_cast<long long>(summary.samples));
  std::printf("  flexible-extract  %.4f  (%lld/%lld)\n", summary.flexible_accuracy,
              static_cast<long long>(summary.flexible_correct), static_cast<long long>(summary.samples));
  std::printf("  mean latency %.3f s, failures %lld, wall %.1f s\n", summary.mean_latency_s,
              static_cast<long long>(summary.failures), duration_s);
  std::fflush(stdout);

  if (!options.output_json.empty()) {
    nlohmann::ordered_json result = {
        {"command", options.command_line},
        {"base_url", options.base_url},
        {"model", model},
        {"dataset", options.dataset},
        {"few_shot", options.few_shot},
        {"few_shot_from", options.few_shot_from.empty() ? options.dataset : options.few_shot_from},
        {"max_tokens", options.max_tokens},
        {"temperature", options.temperature},
        {"stop", options.stop},
        {"concurrency", options.concurrency},
        {"num_samples", summary.samples},
        {"strict", {{"accuracy", summary.strict_accuracy}, {"correct", summary.strict_correct}}},
        {"flexible", {{"accuracy", summary.flexible_accuracy}, {"correct", summary.flexible_correct}}},
        {"failures", summary.failures},
        {"mean_latency_s", summary.mean_latency_s},
        {"duration_s", duration_s},
        {"prompt_example", build_prompt(split.shots, dataset[static_cast<size_t>(split.scored[0])].question)},
    };
    nlohmann::ordered_json& records = result["samples"] = nlohmann::ordered_json::array();
    for (const EvalSample& s : samples) records.push_back(sample_json(s));
    std::ofstream out(options.output_json);
    TACHYON_CHECK(out.good()) << "cannot write " << options.output_json;
    // A completion is whatever the server sent; never let a stray invalid byte lose the report.
    out << result.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  TACHYON_CHECK(summary.failures == 0) << summary.failures << " of " << summary.samples
                                       << " requests failed; the first: " << [&] {
                                            for (const EvalSample& s : samples) {
                                              if (!s.error.empty()) return s.error;
                                            }
                                            return std::string();
                                          }();
}

}  // namespace

void add_eval_command(CLI::App& app, const std::string& command_line) {
  auto options = std::make_shared<EvalOptions>();
  options->command_line = command_line;
  CLI::App* cmd = app.add_subcommand("eval", "few-shot exact-match accuracy of an OpenAI-compatible server (gsm8k-style)");
  cmd->add_option("--base-url", options->base_url, "server to evaluate")->capture_default_str();
  cmd->add_option("--model", options->model, "model name in requests (default: the first of GET /v1/models)");
  cmd->add_option("--api-key", options->api_key, "sent as a bearer token");
  cmd->add_option("--dataset", options->dataset, "JSONL of {\"question\", \"answer\": \"... #### N\"}")->required();
  cmd->add_option("--few-shot", options->few_shot, "examples before each question")->capture_default_str()->check(CLI::Range(0, 1000));
  cmd->add_option("--few-shot-from", options->few_shot_from,
                  "JSONL the examples come from (default: the dataset's first --few-shot records, not scored then)");
  cmd->add_option("--limit", options->limit, "score at most this many records (0: all)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-tokens", options->max_tokens, "tokens per completion")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--concurrency", options->concurrency, "requests in flight")->capture_default_str()->check(CLI::Range(1, 1024));
  cmd->add_option("--temperature", options->temperature, "sampling temperature (0: greedy)")->capture_default_str();
  cmd->add_option("--stop", options->stop, "stop strings; \\n and \\t are unescaped (default: \"Question:\" \"\\n\\n\")");
  cmd->add_option("--output-json", options->output_json, "write the report and every sample here");
  cmd->add_flag("--no-progress", options->no_progress, "no progress line on stderr");
  cmd->callback([options] { run_eval(*options); });
}

}  // namespace tachyon::cli
