// Metrics, table and JSON of `bench serve` (see bench_serve_metrics.h).
#include "tachyon/cli/bench_serve_metrics.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <sstream>

namespace tachyon::cli {
namespace {

double mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double population_std(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const double m = mean(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

std::string line(const std::string& label, const std::string& value) {
  char buf[128];
  std::snprintf(buf, sizeof(buf), "%-40s %-10s\n", label.c_str(), value.c_str());
  return buf;
}

std::string fixed2(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f", v);
  return buf;
}

std::string banner(const std::string& text, char fill) {
  const size_t width = 50, left = (width - std::min(width, text.size())) / 2;
  std::string out(left, fill);
  out += text;
  out += std::string(width - std::min(width, out.size()), fill);
  return out + "\n";
}

std::string metric_label(const std::string& name) {
  if (name == "ttft") return "TTFT";
  if (name == "tpot") return "TPOT";
  if (name == "itl") return "ITL";
  return "E2EL";
}

std::string metric_header(const std::string& name) {
  if (name == "ttft") return "Time to First Token";
  if (name == "tpot") return "Time per Output Token (excl. 1st token)";
  if (name == "itl") return "Inter-token Latency";
  return "End-to-end Latency";
}

std::string today() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto below = static_cast<size_t>(std::floor(rank));
  const size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (rank - static_cast<double>(below)) * (values[above] - values[below]);
}

std::string percentile_word(double p) {
  std::ostringstream s;
  s << p;
  return s.str();
}

MetricStats metric_stats(const std::string& name, const std::vector<double>& seconds, const std::vector<double>& ps) {
  MetricStats m;
  m.name = name;
  m.mean_ms = mean(seconds) * 1e3;
  m.median_ms = percentile(seconds, 50) * 1e3;
  m.std_ms = population_std(seconds) * 1e3;
  for (double p : ps) m.percentiles_ms.emplace_back(p, percentile(seconds, p) * 1e3);
  return m;
}

BenchSummary summarize(const BenchRun& run, const std::vector<RequestOutcome>& outcomes) {
  BenchSummary s;
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const RequestOutcome& o : outcomes) {
    if (!o.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.total_input += o.prompt_tokens;
    s.total_cached_input += o.cached_tokens;
    s.total_output += o.output_tokens;
    ttfts.push_back(o.ttft);
    e2els.push_back(o.latency);
    itls.insert(itls.end(), o.itl.begin(), o.itl.end());
    if (o.output_tokens > 1) tpots.push_back((o.latency - o.ttft) / static_cast<double>(o.output_tokens - 1));
  }
  if (run.duration > 0) {
    s.request_throughput = static_cast<double>(s.completed) / run.duration;
    s.output_throughput = static_cast<double>(s.total_output) / run.duration;
    s.total_token_throughput = static_cast<double>(s.total_input + s.total_output) / run.duration;
  }
  for (const std::string& name : run.percentile_metrics) {
    const std::vector<double>& values = name == "ttft" ? ttfts : name == "tpot" ? tpots : name == "itl" ? itls : e2els;
    s.metrics.push_back(metric_stats(name, values, run.metric_percentiles));
  }
  return s;
}

std::string format_table(const BenchRun& run, const BenchSummary& s, const std::string& sections) {
  std::string out = banner(" Serving Benchmark Result ", '=');
  out += line("Successful requests:", std::to_string(s.completed));
  out += line("Failed requests:", std::to_string(s.failed));
  if (run.max_concurrency > 0) out += line("Maximum request concurrency:", std::to_string(run.max_concurrency));
  if (!std::isinf(run.request_rate)) out += line("Request rate configured (RPS):", fixed2(run.request_rate));
  out += line("Benchmark duration (s):", fixed2(run.duration));
  out += line("Total input tokens:", std::to_string(s.total_input));
  if (s.total_cached_input > 0) {  // a server that reports its prefix-cache hits in usage, and had some
    out += line("Total cached input tokens:", std::to_string(s.total_cached_input));
    out += line("Prefix cache hit rate (%):",
                fixed2(100.0 * static_cast<double>(s.total_cached_input) / static_cast<double>(s.total_input)));
  }
  out += line("Total generated tokens:", std::to_string(s.total_output));
  out += line("Request throughput (req/s):", fixed2(s.request_throughput));
  out += line("Output token throughput (tok/s):", fixed2(s.output_throughput));
  out += line("Total Token throughput (tok/s):", fixed2(s.total_token_throughput));
  for (const MetricStats& m : s.metrics) {
    const std::string label = metric_label(m.name);
    out += banner(metric_header(m.name), '-');
    out += line("Mean " + label + " (ms):", fixed2(m.mean_ms));
    out += line("Median " + label + " (ms):", fixed2(m.median_ms));
    for (const auto& [p, value] : m.percentiles_ms) out += line("P" + percentile_word(p) + " " + label + " (ms):", fixed2(value));
  }
  return out + sections + std::string(50, '=') + "\n";
}

nlohmann::ordered_json result_json(const BenchRun& run, const BenchSummary& s, const std::vector<RequestOutcome>& outcomes) {
  nlohmann::ordered_json j;
  j["date"] = today();
  j["backend"] = "openai";
  j["model_id"] = run.model_id;
  j["num_prompts"] = run.num_prompts;
  if (std::isinf(run.request_rate)) {
    j["request_rate"] = "inf";
  } else {
    j["request_rate"] = run.request_rate;
  }
  j["burstiness"] = run.burstiness;
  j["max_concurrency"] = run.max_concurrency > 0 ? nlohmann::ordered_json(run.max_concurrency) : nlohmann::ordered_json();
  j["duration"] = run.duration;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["total_input_tokens"] = s.total_input;
  if (s.total_cached_input > 0) j["total_cached_input_tokens"] = s.total_cached_input;
  j["total_output_tokens"] = s.total_output;
  j["request_throughput"] = s.request_throughput;
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  // Per request, in dataset order, failures included (as vLLM: zeros and the error text). Built
  // apart and moved in: references into an ordered_json die when it grows.
  nlohmann::ordered_json input_lens = nlohmann::ordered_json::array(), output_lens = nlohmann::ordered_json::array(),
                         ttfts = nlohmann::ordered_json::array(), itls = nlohmann::ordered_json::array(),
                         errors = nlohmann::ordered_json::array(), texts = nlohmann::ordered_json::array();
  for (const RequestOutcome& o : outcomes) {
    input_lens.push_back(o.prompt_tokens);
    output_lens.push_back(o.success ? o.output_tokens : 0);
    ttfts.push_back(o.ttft);
    itls.push_back(o.itl);
    errors.push_back(o.error);
    texts.push_back(o.generated_text);
  }
  j["input_lens"] = std::move(input_lens);
  j["output_lens"] = std::move(output_lens);
  j["ttfts"] = std::move(ttfts);
  j["itls"] = std::move(itls);
  j["generated_texts"] = std::move(texts);
  j["errors"] = std::move(errors);
  for (const MetricStats& m : s.metrics) {
    j["mean_" + m.name + "_ms"] = m.mean_ms;
    j["median_" + m.name + "_ms"] = m.median_ms;
    j["std_" + m.name + "_ms"] = m.std_ms;
    for (const auto& [p, value] : m.percentiles_ms) j["p" + percentile_word(p) + "_" + m.name + "_ms"] = value;
  }
  j["command"] = run.command_line;
  return j;
}

}  // namespace tachyon::cli
