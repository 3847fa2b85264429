// `tachyon bench serve`: the random dataset, the arrival process, the percentiles, SSE parsing
// and stream timing as pure unit tests, then the real binary against an in-process server on a
// tiny model, and against the built-in model as `tachyon serve` runs it with no model (whose
// 496-token vocabulary no fixed default fits). The pure parts come from the command line's
// library (tachyon_cli_lib).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>

#include "../cli_run.h"
#include "server_fixture.h"
#include "tachyon/cli/bench_serve_client.h"
#include "tachyon/cli/bench_serve_dataset.h"
#include "tachyon/cli/bench_serve_metrics.h"
#include "tachyon/cli/bench_serve_spec_decode.h"
#include "tachyon/cli/bench_serve_structured.h"
#include "tachyon/cli/default_model.h"

namespace tachyon::cli {
namespace {

using tachyon::testing::run_cli;

TEST(BenchServeDataset, LengthsStayInsideTheRangeRatio) {
  EXPECT_EQ(length_range(100, 0.25), std::make_pair(75, 125));
  EXPECT_EQ(length_range(10, 0.0), std::make_pair(10, 10));
  EXPECT_EQ(length_range(1, 0.9), std::make_pair(1, 2));  // never 0
  RandomDatasetOptions o{.num_prompts = 500, .input_len = 100, .output_len = 20, .prefix_len = 7, .range_ratio = 0.25,
                         .vocab_size = 1000};
  std::vector<BenchRequest> requests = make_random_requests(o);
  ASSERT_EQ(requests.size(), 500u);
  int32_t input_min = 1 << 30, input_max = 0;
  for (const BenchRequest& r : requests) {
    ASSERT_EQ(r.prompt_len, static_cast<int32_t>(r.prompt_ids.size()));
    input_min = std::min(input_min, r.prompt_len - 7);
    input_max = std::max(input_max, r.prompt_len - 7);
    EXPECT_GE(r.output_len, 15);
    EXPECT_LE(r.output_len, 25);
    for (int32_t id : r.prompt_ids) ASSERT_TRUE(id >= 0 && id < 1000) << id;
    EXPECT_TRUE(std::equal(r.prompt_ids.begin(), r.prompt_ids.begin() + 7, requests[0].prompt_ids.begin()));
  }
  EXPECT_EQ(input_min, 75);  // 500 draws from 51 values reach both ends
  EXPECT_EQ(input_max, 125);
  o.range_ratio = 0.0;
  for (const BenchRequest& r : make_random_requests(o)) EXPECT_EQ(r.prompt_len, 107);
}

TEST(BenchServeDataset, DeterministicBySeed) {
  RandomDatasetOptions o{.num_prompts = 20, .input_len = 30, .output_len = 5, .range_ratio = 0.5, .seed = 3};
  std::vector<BenchRequest> a = make_random_requests(o), b = make_random_requests(o);
  o.seed = 4;
  std::vector<BenchRequest> c = make_random_requests(o);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt_ids, b[i].prompt_ids);
    EXPECT_EQ(a[i].output_len, b[i].output_len);
  }
  EXPECT_NE(a[0].prompt_ids, c[0].prompt_ids);
}

TEST(BenchServeDataset, TextPromptsHaveTheDrawnNumberOfWords) {
  RandomDatasetOptions o{.num_prompts = 10, .input_len = 12, .prefix_len = 3, .range_ratio = 0.5, .as_text = true};
  for (const BenchRequest& r : make_random_requests(o)) {
    EXPECT_TRUE(r.prompt_ids.empty());
    EXPECT_EQ(std::count(r.prompt_text.begin(), r.prompt_text.end(), ' ') + 1, r.prompt_len) << r.prompt_text;
  }
}

// Mean and coefficient of variation of the gaps between arrivals.
std::pair<double, double> gap_stats(const std::vector<double>& times) {
  std::vector<double> gaps;
  for (size_t i = 1; i < times.size(); ++i) gaps.push_back(times[i] - times[i - 1]);
  double mean = 0, var = 0;
  for (double g : gaps) mean += g / gaps.size();
  for (double g : gaps) var += (g - mean) * (g - mean) / gaps.size();
  return {mean, std::sqrt(var) / mean};
}

TEST(BenchServeArrivals, MeanGapIsOneOverRateAndBurstinessShapesTheSpread) {
  for (double burstiness : {0.25, 1.0, 4.0}) {
    std::vector<double> times = arrival_times(20000, 10.0, burstiness, 1);
    EXPECT_EQ(times[0], 0.0);
    EXPECT_TRUE(std::is_sorted(times.begin(), times.end()));
    auto [mean, cv] = gap_stats(times);
    EXPECT_NEAR(mean, 0.1, 0.1 * 0.05) << burstiness;
    EXPECT_NEAR(cv, 1.0 / std::sqrt(burstiness), 0.1 / std::sqrt(burstiness)) << burstiness;  // gamma: cv = 1/sqrt(shape)
  }
  EXPECT_EQ(arrival_times(50, 10.0, 1.0, 7), arrival_times(50, 10.0, 1.0, 7));
  EXPECT_NE(arrival_times(50, 10.0, 1.0, 7), arrival_times(50, 10.0, 1.0, 8));
  for (double t : arrival_times(5, INFINITY, 1.0, 0)) EXPECT_EQ(t, 0.0);
}

TEST(BenchServeMetrics, PercentilesInterpolateAsNumpy) {
  std::vector<double> v = {4, 1, 3, 2};  // sorted 1 2 3 4, rank = p/100 * 3
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 25), 1.75);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);
  EXPECT_DOUBLE_EQ(percentile({5}, 99), 5.0);
  EXPECT_DOUBLE_EQ(percentile({}, 99), 0.0);
  MetricStats m = metric_stats("ttft", {0.001, 0.003}, {50, 90});
  EXPECT_DOUBLE_EQ(m.mean_ms, 2.0);
  EXPECT_DOUBLE_EQ(m.std_ms, 1.0);  // population std
  EXPECT_DOUBLE_EQ(m.percentiles_ms[1].second, 2.8);
  EXPECT_EQ(percentile_word(99), "99");
  EXPECT_EQ(percentile_word(99.9), "99.9");
}

TEST(BenchServeMetrics, SummaryCountsOnlySuccessesAndTpotNeedsTwoTokens) {
  RequestOutcome a{.success = true, .ttft = 0.1, .latency = 0.5, .itl = {0.2, 0.2}, .prompt_tokens = 10, .output_tokens = 3};
  RequestOutcome b{.success = true, .ttft = 0.2, .latency = 0.2, .prompt_tokens = 10, .output_tokens = 1};
  RequestOutcome c{.success = false, .error = "HTTP 503: busy"};
  BenchRun run{.model_id = "m", .num_prompts = 3, .request_rate = INFINITY, .duration = 2.0,
               .percentile_metrics = {"ttft", "tpot", "itl", "e2el"}, .metric_percentiles = {99}};
  BenchSummary s = summarize(run, {a, b, c});
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.total_input, 20);
  EXPECT_EQ(s.total_output, 4);
  EXPECT_DOUBLE_EQ(s.request_throughput, 1.0);
  EXPECT_DOUBLE_EQ(s.total_token_throughput, 12.0);
  EXPECT_NEAR(s.metrics[1].mean_ms, 200.0, 1e-9);  // (0.5 - 0.1) / 2 from a only
  nlohmann::ordered_json j = result_json(run, s, {a, b, c});
  EXPECT_EQ(j["errors"][2], "HTTP 503: busy");
  EXPECT_EQ(j["output_lens"][2], 0);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_TRUE(j.contains("p99_itl_ms"));
  const std::string table = format_table(run, s);
  EXPECT_NE(table.find("============ Serving Benchmark Result ============"), std::string::npos) << table;
  EXPECT_NE(table.find("P99 TPOT (ms):"), std::string::npos) << table;
}

// A result file's keys come in the order they are written (vLLM's), the same in every run, so a
// diff of two files in bench/results shows changed figures, not reshuffled keys.
TEST(BenchServeMetrics, ResultKeysComeInTheirWrittenOrder) {
  RequestOutcome a{.success = true, .ttft = 0.1, .latency = 0.5, .itl = {0.2, 0.2}, .prompt_tokens = 10, .output_tokens = 3};
  BenchRun run{.model_id = "m", .num_prompts = 1, .request_rate = 2.0, .duration = 1.0,
               .percentile_metrics = {"ttft", "itl"}, .metric_percentiles = {50, 99}};
  const BenchSummary s = summarize(run, {a});
  const nlohmann::ordered_json j = result_json(run, s, {a});
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  const std::vector<std::string> expected = {
      "date", "backend", "model_id", "num_prompts", "request_rate", "burstiness", "max_concurrency", "duration",
      "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput", "output_throughput",
      "total_token_throughput", "input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors",
      "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p99_ttft_ms",
      "mean_itl_ms", "median_itl_ms", "std_itl_ms", "p50_itl_ms", "p99_itl_ms", "command"};
  EXPECT_EQ(keys, expected);
}

// The spec_decode counters of tachyon's /metrics and of vLLM's, summed over label sets but the
// position; comments, other series and names that only start alike are passed over.
TEST(BenchServeSpecDecode, CountersParseFromEitherServersMetrics) {
  const std::string tachyon_text =
      "# HELP tachyon:spec_decode_num_drafts_total Sequence steps that carried draft tokens.\n"
      "# TYPE tachyon:spec_decode_num_drafts_total counter\n"
      "tachyon:spec_decode_num_drafts_total{model_name=\"tiny\"} 40\n"
      "tachyon:spec_decode_num_draft_tokens_total{model_name=\"tiny\"} 120\n"
      "tachyon:spec_decode_num_accepted_tokens_total{model_name=\"tiny\"} 66\n"
      "tachyon:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"0\"} 30\n"
      "tachyon:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"2\"} 14\n"
      "tachyon:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"1\"} 22\n"
      "tachyon:spec_decode_num_drafts_totalish 999\n"
      "tachyon:generation_tokens_total{model_name=\"tiny\"} 5000\n";
  const std::optional<SpecDecodeCounters> t = parse_spec_decode_counters(tachyon_text);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->num_drafts, 40);
  EXPECT_EQ(t->draft_tokens, 120);
  EXPECT_EQ(t->accepted_tokens, 66);
  EXPECT_EQ(t->accepted_per_position, (std::vector<double>{30, 22, 14}));

  const std::string vllm_text =  // two engines' series are summed
      "vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"m\"} 10.0\n"
      "vllm:spec_decode_num_drafts_total{engine=\"1\",model_name=\"m\"} 5.0\n"
      "vllm:spec_decode_num_draft_tokens_total{engine=\"0\",model_name=\"m\"} 30.0\n"
      "vllm:spec_decode_num_accepted_tokens_total{engine=\"0\",model_name=\"m\"} 12.0\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",model_name=\"m\",position=\"0\"} 8.0\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"1\",model_name=\"m\",position=\"0\"} 1.0\n";
  const std::optional<SpecDecodeCounters> v = parse_spec_decode_counters(vllm_text);
  ASSERT_TRUE(v.has_value());
  EXPECT_EQ(v->num_drafts, 15);
  EXPECT_EQ(v->draft_tokens, 30);
  EXPECT_EQ(v->accepted_tokens, 12);
  EXPECT_EQ(v->accepted_per_position, (std::vector<double>{9}));

  EXPECT_FALSE(parse_spec_decode_counters("tachyon:num_requests_running{model_name=\"tiny\"} 3\n").has_value());
  EXPECT_FALSE(parse_spec_decode_counters("").has_value());
}

// The run's figures are the difference of the readings around it; a run without drafts, or a
// reading that is missing, reports nothing.
TEST(BenchServeSpecDecode, StatsAreTheRunsDifference) {
  const SpecDecodeCounters before{.num_drafts = 10, .draft_tokens = 30, .accepted_tokens = 12,
                                  .accepted_per_position = {6, 4, 2}};
  const SpecDecodeCounters after{.num_drafts = 50, .draft_tokens = 150, .accepted_tokens = 78,
                                 .accepted_per_position = {36, 26, 16}};
  const std::optional<SpecDecodeStats> s = spec_decode_stats(before, after);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->num_drafts, 40);
  EXPECT_EQ(s->draft_tokens, 120);
  EXPECT_EQ(s->accepted_tokens, 66);
  EXPECT_DOUBLE_EQ(s->acceptance_rate, 66.0 / 120.0);
  EXPECT_DOUBLE_EQ(s->acceptance_length, 1.0 + 66.0 / 40.0);
  EXPECT_EQ(s->per_position_acceptance_rates, (std::vector<double>{30.0 / 40, 22.0 / 40, 14.0 / 40}));
  EXPECT_FALSE(spec_decode_stats(after, after).has_value()) << "no drafts in the run";
  EXPECT_FALSE(spec_decode_stats(std::nullopt, after).has_value());
  EXPECT_FALSE(spec_decode_stats(before, std::nullopt).has_value());

  const std::string section = format_spec_decode(*s);
  EXPECT_NE(section.find("Speculative Decoding"), std::string::npos) << section;
  EXPECT_NE(section.find("Acceptance rate (%):                     55.00"), std::string::npos) << section;
  EXPECT_NE(section.find("Acceptance length:                       2.65"), std::string::npos) << section;
  EXPECT_NE(section.find("Per-position acceptance (%):             75.00, 55.00, 35.00"), std::string::npos) << section;
  nlohmann::ordered_json j;
  add_spec_decode_json(j, *s);
  EXPECT_DOUBLE_EQ(j["spec_decode_acceptance_rate"].get<double>(), 55.0);
  EXPECT_EQ(j["spec_decode_num_drafts"], 40);
  EXPECT_EQ(j["spec_decode_per_position_acceptance_rates"],
            nlohmann::ordered_json::array({30.0 / 40 * 100, 22.0 / 40 * 100, 14.0 / 40 * 100}));
}

TEST(BenchServeSse, EventsSurviveAnySplit) {
  const std::string body = ": comment\r\ndata: {\"a\":1}\r\n\r\ndata: {\"b\":2}\n\nevent: x\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n";
  const std::vector<std::string> expected = {"{\"a\":1}", "{\"b\":2}", "line1\nline2", "[DONE]"};
  for (size_t split = 0; split <= body.size(); ++split) {
    SseParser parser;
    std::vector<std::string> got = parser.feed(std::string_view(body).substr(0, split));
    for (std::string& e : parser.feed(std::string_view(body).substr(split))) got.push_back(std::move(e));
    EXPECT_EQ(got, expected) << "split at " << split;
  }
  SseParser bytewise;
  std::vector<std::string> got;
  for (char c : body) {
    for (std::string& e : bytewise.feed(std::string_view(&c, 1))) got.push_back(std::move(e));
  }
  EXPECT_EQ(got, expected);
  EXPECT_TRUE(SseParser().feed("data: unfinished\n").empty());
}

TEST(BenchServeStream, TimesChunksAndTakesTokensFromUsage) {
  RequestOutcome o;
  StreamTimer timer(o);
  EXPECT_TRUE(timer.on_payload(R"({"choices":[{"text":"a","finish_reason":null}]})", 0.5));
  EXPECT_TRUE(timer.on_payload(R"({"choices":[{"text":"b","finish_reason":null}]})", 0.7));
  EXPECT_TRUE(timer.on_payload(R"({"choices":[{"text":"","finish_reason":"length"}]})", 1.0));
  EXPECT_TRUE(timer.on_payload(
      R"({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":5}}})",
      1.1));
  EXPECT_FALSE(timer.on_payload("[DONE]", 1.2));
  timer.finish(16);
  EXPECT_TRUE(o.success);
  EXPECT_DOUBLE_EQ(o.ttft, 0.5);
  EXPECT_DOUBLE_EQ(o.latency, 1.0);
  ASSERT_EQ(o.itl.size(), 2u);
  EXPECT_NEAR(o.itl[0], 0.2, 1e-12);
  EXPECT_NEAR(o.itl[1], 0.3, 1e-12);
  EXPECT_EQ(o.prompt_tokens, 9);
  EXPECT_EQ(o.output_tokens, 4);
  EXPECT_EQ(o.cached_tokens, 5);

  RequestOutcome chat;  // no usage: count chunks; the role-only delta is no token
  StreamTimer chat_timer(chat);
  chat_timer.on_payload(R"({"choices":[{"delta":{"role":"assistant","content":""}}]})", 0.1);
  chat_timer.on_payload(R"({"choices":[{"delta":{"content":"hi"}}]})", 0.3);
  chat_timer.on_payload(R"({"choices":[{"delta":{"content":"!"},"finish_reason":"stop"}]})", 0.4);
  chat_timer.finish(16);
  EXPECT_TRUE(chat.success);
  EXPECT_DOUBLE_EQ(chat.ttft, 0.3);
  EXPECT_EQ(chat.output_tokens, 2);
  EXPECT_EQ(chat.prompt_tokens, 16);

  RequestOutcome failed;
  StreamTimer failed_timer(failed);
  EXPECT_FALSE(failed_timer.on_payload(R"({"error":{"message":"boom"}})", 0.1));
  failed_timer.finish(16);
  EXPECT_FALSE(failed.success);
  EXPECT_NE(failed.error.find("boom"), std::string::npos);
}

TEST(BenchServeStream, RequestBodyAsVllmSendsIt) {
  ServerTarget target{.model = "m"};
  BenchRequest r{.prompt_ids = {1, 2, 3}, .prompt_len = 3, .output_len = 8};
  nlohmann::json body = nlohmann::json::parse(request_body(target, r, true));
  EXPECT_EQ(body["prompt"], nlohmann::json({1, 2, 3}));
  EXPECT_EQ(body["max_tokens"], 8);
  EXPECT_EQ(body["min_tokens"], 8);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["temperature"], 0.0);
  EXPECT_FALSE(nlohmann::json::parse(request_body(target, r, false)).contains("min_tokens"));
}

std::string write_temp_json(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::temp_directory_path() / ("bench-" + std::to_string(::getpid()) + "-" + name);
  std::ofstream(path) << text;
  return path.string();
}

TEST(BenchServeStructured, OptionsBecomeRequestFields) {
  const std::string schema = write_temp_json("schema.json", R"({"type": "object", "properties": {"a": {"type": "string"}}})");
  const std::string tools = write_temp_json("tools.json", R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_TRUE(structured_request_fields({}, true, true).empty());
  EXPECT_EQ(structured_request_fields({.response_format = "json_object"}, false, false),
            nlohmann::ordered_json::parse(R"({"response_format": {"type": "json_object"}})"));
  const auto with_schema = structured_request_fields({.response_format = "json_schema", .json_schema_file = schema}, false, false);
  EXPECT_EQ(with_schema["response_format"]["json_schema"]["schema"]["properties"]["a"]["type"], "string");
  EXPECT_EQ(with_schema["response_format"]["json_schema"]["strict"], true);
  const auto named = structured_request_fields({.tools_file = tools, .tool_choice = "f"}, true, false);
  EXPECT_EQ(named["tools"][0]["function"]["name"], "f");
  EXPECT_EQ(named["tool_choice"]["function"]["name"], "f");
  EXPECT_EQ(structured_request_fields({.tools_file = tools, .tool_choice = "auto"}, true, true)["tool_choice"], "auto");
  // What the server would refuse is refused here first.
  EXPECT_THROW(structured_request_fields({.response_format = "json_object"}, false, /*ignore_eos=*/true), Error);
  EXPECT_THROW(structured_request_fields({.tools_file = tools, .tool_choice = "required"}, true, true), Error);
  EXPECT_THROW(structured_request_fields({.tools_file = tools}, /*chat_endpoint=*/false, false), Error);
  EXPECT_THROW(structured_request_fields({.response_format = "json_object", .tools_file = tools, .tool_choice = "required"}, true, false), Error);
  EXPECT_THROW(structured_request_fields({.tools_file = tools, .tool_choice = "g"}, true, false), Error);
  EXPECT_THROW(structured_request_fields({.response_format = "json_schema"}, false, false), Error);
  EXPECT_THROW(structured_request_fields({.response_format = "yaml"}, false, false), Error);
  EXPECT_THROW(structured_request_fields({.tool_choice = "required"}, true, false), Error);
  std::filesystem::remove(schema);
  std::filesystem::remove(tools);
}

class BenchServeEndToEnd : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new server::testing::ServerUnderTest(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(server_->server->bound_port()); }
  static server::testing::ServerUnderTest* server_;
};
server::testing::ServerUnderTest* BenchServeEndToEnd::server_ = nullptr;

TEST_F(BenchServeEndToEnd, ConcurrencyLimitedRunCompletesEveryRequest) {
  const std::string result = (server_->dir.parent_path() / ("bench-serve-" + std::to_string(::getpid()) + ".json")).string();
  auto [code, output] = run_cli("bench serve --base-url " + base_url() +
                                " --num-prompts 8 --max-concurrency 4 --random-input-len 16 --random-output-len 8"
                                " --ignore-eos --save-result --result-filename " + result);
  ASSERT_EQ(code, 0) << output;
  EXPECT_NE(output.find("============ Serving Benchmark Result ============"), std::string::npos) << output;
  EXPECT_NE(output.find("Maximum request concurrency:             4"), std::string::npos) << output;
  std::ifstream in(result);
  ASSERT_TRUE(in.good()) << result;
  nlohmann::json j = nlohmann::json::parse(in);
  std::filesystem::remove(result);
  EXPECT_EQ(j["model_id"], "tiny");  // from GET /v1/models
  EXPECT_EQ(j["completed"], 8);
  EXPECT_EQ(j["failed"], 0);
  EXPECT_EQ(j["total_input_tokens"], 8 * 16);
  EXPECT_EQ(j["total_output_tokens"], 64);
  EXPECT_EQ(j["max_concurrency"], 4);
  ASSERT_EQ(j["ttfts"].size(), 8u);
  for (const auto& t : j["ttfts"]) EXPECT_GT(t.get<double>(), 0.0);
  for (const auto& itl : j["itls"]) {
    EXPECT_FALSE(itl.empty());
    for (const auto& t : itl) EXPECT_GT(t.get<double>(), 0.0);
  }
  for (const char* key : {"mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms", "mean_tpot_ms",
                          "mean_e2el_ms", "p99_e2el_ms", "std_e2el_ms"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_GT(j[key].get<double>(), 0.0) << key;
  }
  EXPECT_NE(j["command"].get<std::string>().find("bench serve"), std::string::npos);
  EXPECT_FALSE(j.contains("spec_decode_num_drafts")) << "a server without drafts reports no speculation";
  // 16 random ids a prompt: no full block before the last token, so nothing cached to report.
  EXPECT_FALSE(j.contains("total_cached_input_tokens")) << j.dump().substr(0, 300);
  EXPECT_EQ(output.find("Prefix cache hit rate"), std::string::npos) << output;
  EXPECT_EQ(output.find("Speculative Decoding"), std::string::npos) << output;
  EXPECT_TRUE(server_->wait_idle());
}

// Prompts sharing a 48-token prefix: every request after the first four (which run at once) finds
// its 3 full blocks cached, as the server's usage says, and the report sums them.
TEST_F(BenchServeEndToEnd, SharedPrefixesShowAsCachedInputTokens) {
  const std::string result = (server_->dir.parent_path() / ("bench-prefix-" + std::to_string(::getpid()) + ".json")).string();
  auto [code, output] = run_cli("bench serve --base-url " + base_url() +
                                " --num-prompts 12 --max-concurrency 4 --random-prefix-len 48 --random-input-len 8"
                                " --random-output-len 2 --ignore-eos --save-result --result-filename " + result);
  ASSERT_EQ(code, 0) << output;
  std::ifstream in(result);
  ASSERT_TRUE(in.good()) << result;
  nlohmann::json j = nlohmann::json::parse(in);
  std::filesystem::remove(result);
  ASSERT_TRUE(j.contains("total_cached_input_tokens")) << output;
  const int64_t cached = j["total_cached_input_tokens"].get<int64_t>();
  EXPECT_GE(cached, 8 * 48) << "every request after the first wave hits the prefix";
  EXPECT_LE(cached, 12 * 48);
  EXPECT_EQ(cached % 16, 0) << "whole blocks";
  EXPECT_NE(output.find("Prefix cache hit rate (%):"), std::string::npos) << output;
  EXPECT_TRUE(server_->wait_idle());
}

// Against a server with n-gram drafts: the report's figures are the server's own counters over
// the timed run (read here around the same run: the warm-ups fall before both readings).
TEST(BenchServeSpeculative, TheRunsAcceptanceComesFromTheServersCounters) {
  core::EngineConfig engine = server::testing::ServerUnderTest::default_engine();
  engine.speculative = {.method = "ngram", .num_speculative_tokens = 3, .ngram_min = 1, .ngram_max = 2};
  server::testing::ServerUnderTest server(engine);
  const std::string base_url = "http://127.0.0.1:" + std::to_string(server.server->bound_port());
  const std::string result = (server.dir.parent_path() / ("bench-spec-" + std::to_string(::getpid()) + ".json")).string();
  auto read = [&] { return *parse_spec_decode_counters(*server_metrics_text({.base_url = base_url})); };
  auto [code, output] = run_cli("bench serve --base-url " + base_url +
                                " --num-prompts 8 --max-concurrency 4 --random-input-len 24 --random-output-len 48"
                                " --ignore-eos --num-warmups 2 --result-filename " + result);
  ASSERT_EQ(code, 0) << output;
  const SpecDecodeCounters total = read();
  std::ifstream in(result);
  ASSERT_TRUE(in.good()) << result;
  nlohmann::json j = nlohmann::json::parse(in);
  std::filesystem::remove(result);
  ASSERT_TRUE(j.contains("spec_decode_num_drafts")) << output;
  const int64_t drafts = j["spec_decode_num_drafts"], draft_tokens = j["spec_decode_draft_tokens"],
                accepted = j["spec_decode_accepted_tokens"];
  EXPECT_GT(drafts, 0);
  // The run's share of the server's totals: all but the initial request's and the warm-ups'.
  EXPECT_LE(drafts, total.num_drafts);
  EXPECT_LE(draft_tokens, total.draft_tokens);
  EXPECT_LE(accepted, total.accepted_tokens);
  EXPECT_LE(draft_tokens, 3 * drafts);
  EXPECT_DOUBLE_EQ(j["spec_decode_acceptance_rate"].get<double>(), 100.0 * accepted / draft_tokens);
  EXPECT_DOUBLE_EQ(j["spec_decode_acceptance_length"].get<double>(), 1.0 + static_cast<double>(accepted) / drafts);
  ASSERT_EQ(j["spec_decode_per_position_acceptance_rates"].size(), 3u);
  double per_position = 0;
  for (const auto& r : j["spec_decode_per_position_acceptance_rates"]) per_position += r.get<double>() / 100.0 * drafts;
  EXPECT_NEAR(per_position, static_cast<double>(accepted), 1e-6) << "every accepted token is at one position";
  EXPECT_NE(output.find("---------------Speculative Decoding---------------"), std::string::npos) << output;
  EXPECT_TRUE(server.wait_idle());
}

TEST_F(BenchServeEndToEnd, PoissonArrivalsFinish) {
  auto [code, output] = run_cli("bench serve --base-url " + base_url() +
                                " --model tiny --num-prompts 10 --request-rate 50 --random-input-len 16 --random-output-len 4"
                                " --random-range-ratio 0.5 --metric-percentiles 50,90");
  ASSERT_EQ(code, 0) << output;
  EXPECT_NE(output.find("Successful requests:                     10"), std::string::npos) << output;
  EXPECT_NE(output.find("Request rate configured (RPS):           50.00"), std::string::npos) << output;
  EXPECT_NE(output.find("P90 ITL (ms):"), std::string::npos) << output;
}

TEST_F(BenchServeEndToEnd, AMisconfiguredRunFailsFastWithTheServersMessage) {
  auto [code, output] = run_cli("bench serve --base-url " + base_url() + " --model nope --num-prompts 4 --random-input-len 8");
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("initial test request failed"), std::string::npos) << output;
  EXPECT_NE(output.find("HTTP 404"), std::string::npos) << output;
}

// The constrained options reach the server: each run compiles its constraint there (the schema,
// then the forced call), and every output is JSON of the schema / the tool's arguments. The
// server reads no reasoning (Qwen3's template would let the tiny model think first, and a
// constraint then holds only after </think>), so each output is the constrained text alone.
TEST(BenchServeConstrained, ConstrainedRequestsReachTheServer) {
  server::testing::ServerUnderTest server(server::testing::ServerUnderTest::default_engine(), {}, 0,
                                          [](server::ServingOptions& options) { options.reasoning_parser = "none"; });
  const std::string base_url = "http://127.0.0.1:" + std::to_string(server.server->bound_port());
  const std::string schema = write_temp_json("color.json",
      R"({"type": "object", "properties": {"color": {"enum": ["red", "green"]}}, "required": ["color"]})");
  const std::string tools = write_temp_json("weather.json", R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]}}}])");
  const std::string result = write_temp_json("result.json", "");
  const std::string common = "bench serve --base-url " + base_url +
                             " --endpoint /v1/chat/completions --prompt-format text --num-prompts 4 --max-concurrency 4"
                             " --random-input-len 8 --random-output-len 48 --result-filename " + result;
  const auto& compiler = *server.context->limits().grammar_compiler;
  struct Run {
    std::string options;
    std::string key;
    std::set<std::string> values;
  };
  for (const Run& run : {Run{" --response-format json_schema --json-schema " + schema, "color", {"red", "green"}},
                         Run{" --tools " + tools + " --tool-choice get_weather", "city", {"Paris", "Rome"}}}) {
    SCOPED_TRACE(run.options);
    const size_t grammars = compiler.cached_grammars();
    auto [code, output] = run_cli(common + run.options);
    ASSERT_EQ(code, 0) << output;
    EXPECT_NE(output.find("every request carries"), std::string::npos) << output;
    EXPECT_GT(compiler.cached_grammars(), grammars) << "the server compiled the run's constraint";
    std::ifstream in(result);
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["completed"], 4);
    ASSERT_EQ(j["generated_texts"].size(), 4u);
    for (const auto& text : j["generated_texts"]) {
      const nlohmann::json value = nlohmann::json::parse(text.get<std::string>());
      EXPECT_EQ(run.values.count(value.at(run.key).get<std::string>()), 1u) << text;
    }
  }
  auto [code, output] = run_cli(common + " --response-format json_object --ignore-eos");
  EXPECT_EQ(code, 1) << output;
  EXPECT_NE(output.find("--ignore-eos cannot go with"), std::string::npos) << output;
  for (const std::string& path : {schema, tools, result}) std::filesystem::remove(path);
  EXPECT_TRUE(server.wait_idle());
}

// `tachyon serve` with no model, in-process: the built-in canary under its served name.
class BenchServeBuiltInModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server::ServingOptions options;
    options.model_dir = default_model_dir();
    options.served_model_name = std::string(kDefaultModelName);
    options.engine.device.kind = "cpu";
    context_ = new server::ServingContext(options);
    server_ = new server::HttpServer(*context_, server::HttpOptions{.port = 0});
    server_->bind();
    thread_ = new std::thread([] { server_->serve(); });
  }
  static void TearDownTestSuite() {
    server_->shutdown();
    thread_->join();
    delete thread_;
    delete server_;
    delete context_;
  }
  static std::string base_url() { return "http://127.0.0.1:" + std::to_string(server_->bound_port()); }
  static server::ServingContext* context_;
  static server::HttpServer* server_;
  static std::thread* thread_;
};
server::ServingContext* BenchServeBuiltInModel::context_ = nullptr;
server::HttpServer* BenchServeBuiltInModel::server_ = nullptr;
std::thread* BenchServeBuiltInModel::thread_ = nullptr;

// No --vocab-size and no --model: both come from GET /v1/models, so every random id is valid.
TEST_F(BenchServeBuiltInModel, DefaultOptionsLearnTheServedVocabulary) {
  auto [code, output] = run_cli("bench serve --base-url " + base_url() +
                                " --num-prompts 6 --max-concurrency 3 --random-input-len 64 --random-output-len 4");
  ASSERT_EQ(code, 0) << output;
  EXPECT_NE(output.find("model tachyon-canary"), std::string::npos) << output;
  EXPECT_NE(output.find("token ids in [0, 496) (vocab_size of GET /v1/models)"), std::string::npos) << output;
  EXPECT_NE(output.find("Successful requests:                     6"), std::string::npos) << output;
  EXPECT_NE(output.find("Failed requests:                         0"), std::string::npos) << output;
}

}  // namespace
}  // namespace tachyon::cli
