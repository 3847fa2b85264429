// ServerMetrics and Histogram: exact exposition text, counters by finish reason, gauges from an
// EngineStats snapshot, label escaping, opt-in per-request series, concurrent observers, and
// DESIGN rule 2: after 100,000 requests the render has exactly the lines it had after 1,000.
// Every render is also checked line by line by a small exposition-format (0.0.4) parser below.
// Run: ctest --test-dir build -R metrics
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tachyon/base/check.h"
#include "tachyon/server/metrics.h"
#include "tachyon/server/metrics_text.h"

namespace tachyon::server {
namespace {

using engine::FinishReason;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

bool contains_line(const std::string& text, const std::string& line) {
  for (const std::string& l : lines_of(text)) {
    if (l == line) return true;
  }
  return false;
}

// --- A tiny exposition-format 0.0.4 checker -------------------------------------------------

struct Sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // unescaped values
  double value = 0;
};

const std::regex kMetricName("[a-zA-Z_:][a-zA-Z0-9_:]*");
const std::regex kLabelName("[a-zA-Z_][a-zA-Z0-9_]*");

double parse_value(const std::string& text) {
  if (text == "+Inf") return INFINITY;
  if (text == "-Inf") return -INFINITY;
  if (text == "NaN") return NAN;
  size_t used = 0;
  double value = std::stod(text, &used);
  TACHYON_CHECK(used == text.size() && !text.empty()) << "bad value '" << text << "'";
  return value;
}

// name{a="x",b="y"} value   (labels optional)
Sample parse_sample(const std::string& line) {
  Sample sample;
  size_t pos = 0;
  while (pos < line.size() && line[pos] != '{' && line[pos] != ' ') ++pos;
  sample.name = line.substr(0, pos);
  TACHYON_CHECK(std::regex_match(sample.name, kMetricName)) << "bad metric name: " << line;
  if (pos < line.size() && line[pos] == '{') {
    ++pos;
    while (line.at(pos) != '}') {
      size_t eq = line.find('=', pos);
      TACHYON_CHECK(eq != std::string::npos) << "label without '=': " << line;
      std::string label = line.substr(pos, eq - pos);
      TACHYON_CHECK(std::regex_match(label, kLabelName)) << "bad label name '" << label << "': " << line;
      TACHYON_CHECK(line.at(eq + 1) == '"') << "unquoted label value: " << line;
      std::string value;
      pos = eq + 2;
      for (;; ++pos) {
        char c = line.at(pos);
        if (c == '"') break;
        if (c == '\\') {
          char e = line.at(++pos);
          TACHYON_CHECK(e == '\\' || e == '"' || e == 'n') << "bad escape: " << line;
          value += e == 'n' ? '\n' : e;
        } else {
          value += c;
        }
      }
      sample.labels.emplace_back(label, value);
      ++pos;  // past the closing quote
      if (line.at(pos) == ',') ++pos;
    }
    ++pos;  // past '}'
  }
  TACHYON_CHECK(line.at(pos) == ' ') << "no space before the value: " << line;
  sample.value = parse_value(line.substr(pos + 1));
  return sample;
}

// Checks every line and returns the samples. Families: HELP and TYPE at most once each, before
// their samples; samples belong to the family declared last (histograms: _bucket/_sum/_count);
// histogram buckets rise, end with le="+Inf", and +Inf equals _count.
std::vector<Sample> check_exposition(const std::string& text) {
  TACHYON_CHECK(!text.empty() && text.back() == '\n') << "output must end with a newline";
  std::set<std::string> helped, typed;
  std::string family, type;
  std::map<std::string, double> last_bucket;  // per label set (without le)
  std::map<std::string, double> inf_bucket;
  std::vector<Sample> samples;
  for (const std::string& line : lines_of(text)) {
    TACHYON_CHECK(!line.empty()) << "empty line";
    if (line.rfind("# HELP ", 0) == 0) {
      std::string rest = line.substr(7);
      std::string name = rest.substr(0, rest.find(' '));
      TACHYON_CHECK(std::regex_match(name, kMetricName)) << "bad HELP name: " << line;
      TACHYON_CHECK(helped.insert(name).second) << "second HELP: " << line;
      TACHYON_CHECK(rest.find('\n') == std::string::npos);
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      std::smatch m;
      static const std::regex kType("# TYPE ([^ ]+) (counter|gauge|histogram|summary|untyped)");
      TACHYON_CHECK(std::regex_match(line, m, kType)) << "bad TYPE line: " << line;
      TACHYON_CHECK(std::regex_match(m[1].str(), kMetricName)) << "bad TYPE name: " << line;
      TACHYON_CHECK(typed.insert(m[1].str()).second) << "second TYPE: " << line;
      family = m[1].str();
      type = m[2].str();
      continue;
    }
    TACHYON_CHECK(line[0] != '#') << "unknown comment: " << line;
    Sample sample = parse_sample(line);
    std::string key = family + "|";
    std::string le;
    for (const auto& [name, value] : sample.labels) {
      if (name == "le") {
        le = value;
      } else {
        key += name + "=" + value + ",";
      }
    }
    if (type == "histogram") {
      if (sample.name == family + "_bucket") {
        TACHYON_CHECK(!le.empty()) << "bucket without le: " << line;
        double bound = parse_value(le);
        auto it = last_bucket.find(key);
        TACHYON_CHECK(it == last_bucket.end() || it->second <= sample.value) << "buckets not cumulative: " << line;
        last_bucket[key] = sample.value;
        if (std::isinf(bound)) inf_bucket[key] = sample.value;
      } else if (sample.name == family + "_count") {
        TACHYON_CHECK(inf_bucket.count(key) == 1 && inf_bucket[key] == sample.value) << "+Inf != count: " << line;
      } else {
        TACHYON_CHECK(sample.name == family + "_sum") << "sample outside its family: " << line;
      }
    } else {
      TACHYON_CHECK(sample.name == family) << "sample outside its family '" << family << "': " << line;
    }
    samples.push_back(std::move(sample));
  }
  return samples;
}

// The value of the one sample with this exact text before the value, or NaN.
double value_of(const std::string& text, const std::string& series) {
  for (const std::string& line : lines_of(text)) {
    if (line.rfind(series + " ", 0) == 0) return parse_value(line.substr(series.size() + 1));
  }
  return NAN;
}

engine::EngineStats sample_stats() {
  engine::EngineStats stats;
  stats.num_running = 3;
  stats.num_waiting = 7;
  stats.kv_blocks_free = 256;
  stats.kv_blocks_total = 1024;
  stats.preemptions = 2;
  stats.kv.prefix_queries_tokens = 4096;
  stats.kv.prefix_hit_tokens = 1024;
  return stats;
}

// --- Histogram ------------------------------------------------------------------------------

TEST(Histogram, RendersExactText) {
  Histogram histogram({0.25, 1, 4});
  for (double v : {0.125, 0.25, 0.5, 2.0, 8.0}) histogram.observe(v);
  std::string out;
  append_family(out, "x_seconds", "histogram", "A test.");
  append_histogram(out, "x_seconds", "model_name=\"m\"", histogram.snapshot());
  EXPECT_EQ(out,
            "# HELP x_seconds A test.\n"
            "# TYPE x_seconds histogram\n"
            "x_seconds_bucket{model_name=\"m\",le=\"0.25\"} 2\n"
            "x_seconds_bucket{model_name=\"m\",le=\"1\"} 3\n"
            "x_seconds_bucket{model_name=\"m\",le=\"4\"} 4\n"
            "x_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 5\n"
            "x_seconds_sum{model_name=\"m\"} 10.875\n"
            "x_seconds_count{model_name=\"m\"} 5\n");
  check_exposition(out);

  std::string bare;
  append_histogram(bare, "y", "", Histogram({0.001}).snapshot());
  EXPECT_EQ(bare, "y_bucket{le=\"0.001\"} 0\ny_bucket{le=\"+Inf\"} 0\ny_sum 0\ny_count 0\n");
}

TEST(Histogram, BoundsAreInclusiveAndNaNIsIgnored) {
  Histogram histogram({1, 2});
  histogram.observe(-5);   // below the first bound: first bucket
  histogram.observe(1);    // on a bound: that bucket
  histogram.observe(2.5);  // past the last bound: +Inf only
  histogram.observe(NAN);
  HistogramSnapshot snap = histogram.snapshot();
  EXPECT_EQ(snap.cumulative_counts, (std::vector<uint64_t>{2, 2, 3}));
  EXPECT_EQ(snap.count, 3u);
  EXPECT_DOUBLE_EQ(snap.sum, -1.5);
}

TEST(Histogram, RejectsBadBounds) {
  EXPECT_THROW(Histogram({1, 1}), Error);
  EXPECT_THROW(Histogram({2, 1}), Error);
  EXPECT_THROW(Histogram({1, INFINITY}), Error);
  EXPECT_NO_THROW(Histogram({}));
}

TEST(Histogram, StandardBucketsAreValid) {
  for (const auto* buckets : {&kTtftBuckets, &kTokenLatencyBuckets, &kRequestLatencyBuckets, &kStepTokensBuckets}) {
    EXPECT_NO_THROW(Histogram{*buckets});
  }
  EXPECT_EQ(kTtftBuckets.front(), 0.001);
  EXPECT_EQ(kTtftBuckets.back(), 2560);
  EXPECT_EQ(kTokenLatencyBuckets.back(), 80);
}

TEST(MetricsText, FormatsValuesAndEscapes) {
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(3), "3");
  EXPECT_EQ(format_value(INFINITY), "+Inf");
  EXPECT_EQ(format_value(-INFINITY), "-Inf");
  EXPECT_EQ(format_value(NAN), "NaN");
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(escape_help("a\\b\"c\nd"), "a\\\\b\"c\\nd");
}

// --- ServerMetrics --------------------------------------------------------------------------

TEST(ServerMetrics, CountsRequestsByFinishReason) {
  ServerMetrics metrics("llama", false);
  for (int i = 0; i < 5; ++i) metrics.on_request_finished(FinishReason::kStop);
  for (int i = 0; i < 2; ++i) metrics.on_request_finished(FinishReason::kLength);
  metrics.on_request_finished(FinishReason::kAbort);
  metrics.on_request_finished(FinishReason::kNone);  // not a finish: ignored
  std::string out = metrics.render(engine::EngineStats{});
  check_exposition(out);
  EXPECT_TRUE(contains_line(out, "tachyon:request_success_total{model_name=\"llama\",finished_reason=\"stop\"} 5"));
  EXPECT_TRUE(contains_line(out, "tachyon:request_success_total{model_name=\"llama\",finished_reason=\"length\"} 2"));
  EXPECT_TRUE(contains_line(out, "tachyon:request_success_total{model_name=\"llama\",finished_reason=\"abort\"} 1"));
  EXPECT_EQ(out.find("finished_reason=\"\""), std::string::npos);
}

TEST(ServerMetrics, CountsTokens) {
  ServerMetrics metrics("m", false);
  metrics.on_prompt_tokens(100);
  metrics.on_prompt_tokens(-3);  // counters only rise
  metrics.on_generation_tokens(7);
  metrics.on_generation_tokens(0);
  std::string out = metrics.render(engine::EngineStats{});
  EXPECT_TRUE(contains_line(out, "tachyon:prompt_tokens_total{model_name=\"m\"} 100"));
  EXPECT_TRUE(contains_line(out, "tachyon:generation_tokens_total{model_name=\"m\"} 7"));
}

TEST(ServerMetrics, GaugesAndCountersFromEngineStats) {
  ServerMetrics metrics("m", false);
  std::string out = metrics.render(sample_stats());
  check_exposition(out);
  for (const char* line : {"# TYPE tachyon:num_requests_running gauge", "tachyon:num_requests_running{model_name=\"m\"} 3",
                           "# TYPE tachyon:num_requests_waiting gauge", "tachyon:num_requests_waiting{model_name=\"m\"} 7",
                           "# TYPE tachyon:kv_cache_usage_perc gauge", "tachyon:kv_cache_usage_perc{model_name=\"m\"} 0.75",
                           "# TYPE tachyon:prefix_cache_queries_total counter",
                           "tachyon:prefix_cache_queries_total{model_name=\"m\"} 4096",
                           "# TYPE tachyon:prefix_cache_hits_total counter",
                           "tachyon:prefix_cache_hits_total{model_name=\"m\"} 1024",
                           "# TYPE tachyon:num_preemptions_total counter", "tachyon:num_preemptions_total{model_name=\"m\"} 2"}) {
    EXPECT_TRUE(contains_line(out, line)) << line;
  }
  // No KV cache yet (total 0): usage 0, not NaN.
  EXPECT_TRUE(contains_line(metrics.render(engine::EngineStats{}), "tachyon:kv_cache_usage_perc{model_name=\"m\"} 0"));
  // The engine's failure (engine/engine_failure.h) as 0 or 1.
  EXPECT_TRUE(contains_line(out, "# TYPE tachyon:engine_failed gauge"));
  EXPECT_TRUE(contains_line(out, "tachyon:engine_failed{model_name=\"m\"} 0"));
  engine::EngineStats failed;
  failed.failed = true;
  EXPECT_TRUE(contains_line(metrics.render(failed), "tachyon:engine_failed{model_name=\"m\"} 1"));
}

// Speculative decoding's counters come from the engine; the per-position series has one sample
// per position of the configured k (fixed at start-up), and none without a drafter.
TEST(ServerMetrics, SpecDecodeCountersAndOneSeriesPerDraftPosition) {
  ServerMetrics metrics("m", false);
  engine::EngineStats stats = sample_stats();
  std::string out = metrics.render(stats);
  EXPECT_TRUE(contains_line(out, "tachyon:spec_decode_num_draft_tokens_total{model_name=\"m\"} 0"));
  EXPECT_EQ(out.find("spec_decode_num_accepted_tokens_per_pos"), std::string::npos);
  stats.num_speculative_tokens = 3;
  stats.num_drafts = 10;
  stats.draft_tokens = 30;
  stats.draft_tokens_accepted = 12;
  stats.draft_tokens_accepted_per_position = {7, 4, 1};
  out = metrics.render(stats);
  check_exposition(out);
  for (const char* line : {"# TYPE tachyon:spec_decode_num_drafts_total counter",
                           "tachyon:spec_decode_num_drafts_total{model_name=\"m\"} 10",
                           "tachyon:spec_decode_num_draft_tokens_total{model_name=\"m\"} 30",
                           "tachyon:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 12",
                           "# TYPE tachyon:spec_decode_num_accepted_tokens_per_pos_total counter",
                           "tachyon:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 7",
                           "tachyon:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"1\"} 4",
                           "tachyon:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"2\"} 1"}) {
    EXPECT_TRUE(contains_line(out, line)) << line;
  }
  EXPECT_EQ(out.find("position=\"3\""), std::string::npos);
}

TEST(ServerMetrics, EachObserverFeedsItsHistogram) {
  ServerMetrics metrics("m", false);
  metrics.observe_ttft(0.5);
  metrics.observe_inter_token_latency(0.02);
  metrics.observe_time_per_output_token(0.03);
  metrics.observe_e2e_latency(12);
  metrics.observe_queue_time(0.25);
  metrics.observe_prefill_time(0.125);
  metrics.observe_decode_time(11);
  metrics.observe_tokens_per_step(96);
  std::string out = metrics.render(engine::EngineStats{});
  check_exposition(out);
  const std::pair<const char*, double> expected[] = {
      {"tachyon:time_to_first_token_seconds", 0.5},      {"tachyon:inter_token_latency_seconds", 0.02},
      {"tachyon:request_time_per_output_token_seconds", 0.03}, {"tachyon:e2e_request_latency_seconds", 12},
      {"tachyon:request_queue_time_seconds", 0.25},      {"tachyon:request_prefill_time_seconds", 0.125},
      {"tachyon:request_decode_time_seconds", 11},       {"tachyon:iteration_tokens", 96}};
  for (const auto& [name, value] : expected) {
    std::string n = name;
    EXPECT_TRUE(contains_line(out, "# TYPE " + n + " histogram")) << n;
    EXPECT_EQ(value_of(out, n + "_count{model_name=\"m\"}"), 1) << n;
    EXPECT_EQ(value_of(out, n + "_sum{model_name=\"m\"}"), value) << n;
  }
  EXPECT_TRUE(contains_line(out, "tachyon:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.25\"} 0"));
  EXPECT_TRUE(contains_line(out, "tachyon:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.5\"} 1"));
  EXPECT_TRUE(contains_line(out, "tachyon:iteration_tokens_bucket{model_name=\"m\",le=\"64\"} 0"));
  EXPECT_TRUE(contains_line(out, "tachyon:iteration_tokens_bucket{model_name=\"m\",le=\"128\"} 1"));
}

TEST(ServerMetrics, EscapesLabelValues) {
  ServerMetrics metrics("org/model \"v2\"\\beta\nx", true);
  metrics.request_started("id\"1\\\n");
  std::string out = metrics.render(engine::EngineStats{});
  std::vector<Sample> samples = check_exposition(out);
  EXPECT_TRUE(contains_line(out, "tachyon:generation_tokens_total{model_name=\"org/model \\\"v2\\\"\\\\beta\\nx\"} 0"));
  bool found = false;
  for (const Sample& s : samples) {
    EXPECT_EQ(s.labels.at(0), (std::pair<std::string, std::string>("model_name", "org/model \"v2\"\\beta\nx")));
    if (s.name == "tachyon:request_context_tokens") {
      found = true;
      EXPECT_EQ(s.labels.at(1).second, "id\"1\\\n");
    }
  }
  EXPECT_TRUE(found);
}

TEST(ServerMetrics, PerRequestSeriesOnlyWhenEnabled) {
  ServerMetrics off("m", false);
  EXPECT_FALSE(off.per_request_enabled());
  off.request_started("r1");
  off.request_context_tokens("r1", 10);
  std::string out = off.render(engine::EngineStats{});
  EXPECT_EQ(out.find("request_context_tokens"), std::string::npos);
  EXPECT_EQ(out.find("request_id"), std::string::npos);

  ServerMetrics on("m", true);
  ASSERT_TRUE(on.per_request_enabled());
  EXPECT_TRUE(contains_line(on.render(engine::EngineStats{}), "# TYPE tachyon:request_context_tokens gauge"));
  on.request_started("r1");
  on.request_started("r2");
  on.request_context_tokens("r1", 42);
  out = on.render(engine::EngineStats{});
  check_exposition(out);
  EXPECT_TRUE(contains_line(out, "tachyon:request_context_tokens{model_name=\"m\",request_id=\"r1\"} 42"));
  EXPECT_TRUE(contains_line(out, "tachyon:request_context_tokens{model_name=\"m\",request_id=\"r2\"} 0"));

  on.request_ended("r1");
  on.request_context_tokens("r1", 50);  // late update after the end: must not revive it
  on.request_context_tokens("r9", 5);   // never started
  out = on.render(engine::EngineStats{});
  EXPECT_EQ(out.find("request_id=\"r1\""), std::string::npos);
  EXPECT_EQ(out.find("request_id=\"r9\""), std::string::npos);
  EXPECT_TRUE(contains_line(out, "tachyon:request_context_tokens{model_name=\"m\",request_id=\"r2\"} 0"));
  on.request_ended("r2");
  on.request_ended("r2");  // twice is harmless
  EXPECT_EQ(on.render(engine::EngineStats{}).find("request_id"), std::string::npos);
}

TEST(ServerMetrics, PerRequestFromEnvironmentReadOnce) {
  ::setenv("TACHYON_METRICS_PER_REQUEST", "1", 1);
  ServerMetrics from_env("m");
  ServerMetrics forced_off("m", false);
  ::setenv("TACHYON_METRICS_PER_REQUEST", "0", 1);
  ServerMetrics env_zero("m");
  ::unsetenv("TACHYON_METRICS_PER_REQUEST");
  EXPECT_TRUE(from_env.per_request_enabled());  // read at construction, not later
  EXPECT_FALSE(forced_off.per_request_enabled());
  EXPECT_FALSE(env_zero.per_request_enabled());
  EXPECT_FALSE(ServerMetrics("m").per_request_enabled());
}

TEST(ServerMetrics, ConcurrentObserversGiveExactTotals) {
  constexpr int kThreads = 8;
  constexpr int kPerThread = 50000;
  ServerMetrics metrics("m", true);
  std::atomic<bool> done{false};
  std::string reader_error;
  int renders = 0;
  std::thread reader([&] {  // renders while the others write; each render must stay valid
    try {
      for (; !done.load(); ++renders) check_exposition(metrics.render(sample_stats()));
    } catch (const Error& e) {
      reader_error = e.what();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::string id = "req-" + std::to_string(t);
      for (int i = 0; i < kPerThread; ++i) {
        metrics.observe_ttft(i % 2 == 0 ? 0.5 : 4.0);  // exact in binary: the sum is exact
        metrics.observe_tokens_per_step(1);
        metrics.on_request_finished(i % 3 == 0 ? FinishReason::kLength : FinishReason::kStop);
        metrics.on_generation_tokens(2);
        if (i % 100 == 0) {
          metrics.request_started(id);
          metrics.request_context_tokens(id, i);
          metrics.request_ended(id);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  done = true;
  reader.join();
  EXPECT_EQ(reader_error, "");
  EXPECT_GT(renders, 0);

  std::string out = metrics.render(engine::EngineStats{});
  check_exposition(out);
  const double total = kThreads * kPerThread;
  EXPECT_EQ(value_of(out, "tachyon:time_to_first_token_seconds_count{model_name=\"m\"}"), total);
  EXPECT_EQ(value_of(out, "tachyon:time_to_first_token_seconds_sum{model_name=\"m\"}"), total / 2 * 4.5);
  EXPECT_EQ(value_of(out, "tachyon:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.5\"}"), total / 2);
  EXPECT_EQ(value_of(out, "tachyon:iteration_tokens_sum{model_name=\"m\"}"), total);
  EXPECT_EQ(value_of(out, "tachyon:generation_tokens_total{model_name=\"m\"}"), 2 * total);
  int64_t length_per_thread = (kPerThread + 2) / 3;
  EXPECT_EQ(value_of(out, "tachyon:request_success_total{model_name=\"m\",finished_reason=\"length\"}"),
            kThreads * length_per_thread);
  EXPECT_EQ(value_of(out, "tachyon:request_success_total{model_name=\"m\",finished_reason=\"stop\"}"),
            kThreads * (kPerThread - length_per_thread));
  EXPECT_EQ(out.find("request_id"), std::string::npos);
}

// One served request as the server reports it: finish, tokens, every histogram, and (when on)
// its per-request gauge from start to end.
void serve_one(ServerMetrics& metrics, int i) {
  std::string id = "chatcmpl-" + std::to_string(i);
  metrics.request_started(id);
  metrics.request_context_tokens(id, 100 + i % 50);
  metrics.on_prompt_tokens(100);
  metrics.on_generation_tokens(16);
  metrics.observe_ttft(0.01 * (i % 300));
  metrics.observe_inter_token_latency(0.001 * (i % 100));
  metrics.observe_time_per_output_token(0.002 * (i % 100));
  metrics.observe_e2e_latency(0.1 * (i % 1000));
  metrics.observe_queue_time(0.001 * (i % 1000));
  metrics.observe_prefill_time(0.003 * (i % 1000));
  metrics.observe_decode_time(0.05 * (i % 1000));
  metrics.observe_tokens_per_step(i % 20000);
  metrics.on_request_finished(i % 7 == 0 ? FinishReason::kLength : i % 11 == 0 ? FinishReason::kAbort : FinishReason::kStop);
  metrics.request_ended(id);
}

// The render without its values: what would grow if cardinality were not fixed.
std::vector<std::string> skeleton(const std::string& text) {
  std::vector<std::string> lines = lines_of(text);
  for (std::string& line : lines) {
    if (line[0] != '#') line = line.substr(0, line.rfind(' '));
  }
  return lines;
}

// DESIGN rule 2. Byte sizes may differ only by the digits of the values (1,000 vs 100,000), so
// the check is: same lines, same series, and no value wider than a double's shortest text.
TEST(ServerMetrics, RenderDoesNotGrowWithRequestsServed) {
  for (bool per_request : {false, true}) {
    SCOPED_TRACE(per_request ? "per-request series on" : "per-request series off");
    ServerMetrics metrics("m", per_request);
    engine::EngineStats stats = sample_stats();
    for (int i = 0; i < 1000; ++i) serve_one(metrics, i);
    std::string early = metrics.render(stats);

    for (int i = 1000; i < 100000; ++i) serve_one(metrics, i);
    for (int i = 0; i < 1000000 - 8 * 100000; ++i) metrics.observe_ttft(0.0001 * (i % 30000));  // 1,000,000 observations in all
    std::string late = metrics.render(stats);

    check_exposition(late);
    std::vector<std::string> late_lines = lines_of(late);
    EXPECT_EQ(late_lines.size(), lines_of(early).size());
    EXPECT_EQ(skeleton(late), skeleton(early));
    EXPECT_LE(late.size(), early.size() + late_lines.size() * 24);
    EXPECT_EQ(value_of(late, "tachyon:time_to_first_token_seconds_count{model_name=\"m\"}"), 300000);
    EXPECT_EQ(value_of(late, "tachyon:request_success_total{model_name=\"m\",finished_reason=\"length\"}"), 14286);
    EXPECT_EQ(late.find("request_id"), std::string::npos);
  }
}

TEST(ServerMetrics, FullRenderIsValidExposition) {
  ServerMetrics metrics("m", true);
  for (int i = 0; i < 50; ++i) serve_one(metrics, i);
  metrics.request_started("live");
  std::string out = metrics.render(sample_stats());
  std::vector<Sample> samples = check_exposition(out);
  std::set<std::string> families;
  for (const std::string& line : lines_of(out)) {
    if (line.rfind("# TYPE ", 0) == 0) families.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  // 4 gauges and 6 counters from the engine (3 of speculative decoding; the per-position one only
  // with a drafter), 3 counters of requests, 8 histograms, 1 per-request gauge.
  EXPECT_EQ(families.size(), 22u);
  for (const std::string& family : families) EXPECT_EQ(family.rfind("tachyon:", 0), 0u) << family;
}

}  // namespace
}  // namespace tachyon::server
