// The numbers `bench serve` reports, computed as vLLM's calculate_metrics computes them:
// percentiles with numpy's linear interpolation, population std, TPOT only for requests with
// more than one output token, ITL pooled over every request. The table and the JSON use
// vLLM's labels and key names so that results compare side by side.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tachyon/cli/bench_serve_client.h"

namespace tachyon::cli {

// numpy.percentile(values, p) with the default linear method; 0 for no values.
double percentile(std::vector<double> values, double p);

struct MetricStats {
  std::string name;     // ttft, tpot, itl, e2el
  double mean_ms = 0;
  double median_ms = 0;
  double std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (p, value)
};

MetricStats metric_stats(const std::string& name, const std::vector<double>& seconds, const std::vector<double>& ps);

// What the benchmark knew besides the outcomes: it goes into the JSON's header fields.
struct BenchRun {
  std::string model_id;
  int32_t num_prompts = 0;
  double request_rate = 0;       // inf when unset
  double burstiness = 1.0;
  int32_t max_concurrency = 0;   // 0: none
  double duration = 0;           // seconds from the first send to the last completion
  std::vector<std::string> percentile_metrics;  // which of ttft, tpot, itl, e2el to report
  std::vector<double> metric_percentiles;       // e.g. {99}
  std::string command_line;
};

struct BenchSummary {
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t total_input = 0;
  int64_t total_cached_input = 0;  // of total_input, served from the server's prefix cache
  int64_t total_output = 0;
  double request_throughput = 0;
  double output_throughput = 0;
  double total_token_throughput = 0;
  std::vector<MetricStats> metrics;  // in the order of BenchRun::percentile_metrics
};

BenchSummary summarize(const BenchRun& run, const std::vector<RequestOutcome>& outcomes);

// vLLM's "Serving Benchmark Result" table; `sections` (lines with their own headers, such as
// format_spec_decode's) go in before its closing line.
std::string format_table(const BenchRun& run, const BenchSummary& summary, const std::string& sections = {});

// vLLM's result JSON (key names as `vllm bench serve --save-result` writes them) plus "command".
nlohmann::ordered_json result_json(const BenchRun& run, const BenchSummary& summary,
                                   const std::vector<RequestOutcome>& outcomes);

// "99" for 99, "99.9" for 99.9: the suffix of the p<N> keys and P<N> labels.
std::string percentile_word(double p);

}  // namespace tachyon::cli
