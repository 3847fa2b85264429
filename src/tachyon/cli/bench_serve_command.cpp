// tachyon bench serve: a load generator for any OpenAI-compatible server, compatible with
// `vllm bench serve` (same option names, the same random dataset and arrival process, the same
// table and result JSON keys), so numbers from tachyon and vLLM sit side by side. This file
// owns the options and the order of things: find the model, one test request that fails fast
// on a misconfigured run, warm-ups, the timed run (bench_serve_load.cpp), the report
// (bench_serve_metrics.cpp). Prompts go as token ids by default: exact lengths, no tokenizer
// on the client; the ids are drawn below the vocab_size the server publishes for its model
// (GET /v1/models), so the defaults fit any tachyon server, where vLLM's client reads the
// model's tokenizer instead. Tested end to end in tests/server/test_bench_serve.cpp.
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include "tachyon/base/check.h"
#include "tachyon/cli/bench_serve_dataset.h"
#include "tachyon/cli/bench_serve_load.h"
#include "tachyon/cli/bench_serve_metrics.h"
#include "tachyon/cli/bench_serve_spec_decode.h"
#include "tachyon/cli/bench_serve_structured.h"
#include "tachyon/cli/commands.h"

namespace tachyon::cli {
namespace {

struct ServeBenchOptions {
  ServerTarget target;
  std::string host;  // with --port, overrides --base-url's default
  int32_t port = 0;
  std::string dataset_name = "random";
  std::string prompt_format = "ids";
  RandomDatasetOptions dataset;
  int64_t vocab_size = 0;  // --vocab-size; 0: the served model's
  std::string request_rate = "inf";
  double burstiness = 1.0;
  int32_t max_concurrency = 0;
  bool ignore_eos = false;
  int32_t num_warmups = 0;
  std::string percentile_metrics = "ttft,tpot,itl,e2el";
  std::string metric_percentiles = "99";
  bool save_result = false;
  std::string result_dir;
  std::string result_filename;
  bool no_progress = false;
  std::string command_line;
  StructuredBenchOptions structured;
};

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream s(text);
  for (std::string item; std::getline(s, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

double parse_rate(const std::string& text) {
  try {
    size_t used = 0;
    const double rate = std::stod(text, &used);
    if (used == text.size() && rate > 0) return rate;
  } catch (const std::exception&) {
  }
  TACHYON_FAIL() << "--request-rate must be a positive number or inf, got '" << text << "'";
}

std::vector<double> parse_percentiles(const std::string& text) {
  std::vector<double> out;
  for (const std::string& item : split_commas(text)) {
    double p = -1;
    try {
      p = std::stod(item);
    } catch (const std::exception&) {
    }
    TACHYON_CHECK(p > 0 && p < 100) << "--metric-percentiles takes numbers in (0, 100), got '" << item << "'";
    out.push_back(p);
  }
  return out;
}

std::vector<std::string> parse_metrics(const std::string& text) {
  const std::set<std::string> known = {"ttft", "tpot", "itl", "e2el"};
  std::vector<std::string> out = split_commas(text);
  for (const std::string& m : out) {
    TACHYON_CHECK(known.count(m)) << "--percentile-metrics takes ttft, tpot, itl, e2el; got '" << m << "'";
  }
  return out;
}

std::string default_result_filename(const BenchRun& run, const std::string& date) {
  const std::string rate = std::isinf(run.request_rate) ? "inf" : percentile_word(run.request_rate);
  const std::string concurrency = run.max_concurrency > 0 ? "-concurrency" + std::to_string(run.max_concurrency) : "";
  std::string model = run.model_id.substr(run.model_id.find_last_of('/') + 1);
  return "openai-" + rate + "qps" + concurrency + "-" + model + "-" + date + ".json";
}

// Names the model (--model, else the first of GET /v1/models) and sets the range of random ids:
// --vocab-size, else the vocab_size on the model's card, else the dataset's default with a
// warning. Returns what the header says about the prompts.
std::string resolve_model_and_vocab(ServeBenchOptions& options) {
  const bool ids = options.prompt_format == "ids";
  ServedModel served{.id = options.target.model};
  if (options.target.model.empty() || (ids && options.vocab_size == 0)) served = served_model(options.target);
  options.target.model = served.id;
  if (!ids) return "text prompts";
  std::string source = "--vocab-size";
  if (options.vocab_size > 0) {
    options.dataset.vocab_size = options.vocab_size;
  } else if (served.vocab_size > 0) {
    options.dataset.vocab_size = served.vocab_size;
    source = "vocab_size of GET /v1/models";
  } else {
    source = "default";
    std::fprintf(stderr,
                 "bench serve: GET /v1/models gives no vocab_size for %s; token ids are drawn in [0, %lld), which "
                 "must fit the model's vocabulary: pass --vocab-size\n",
                 served.id.c_str(), static_cast<long long>(options.dataset.vocab_size));
  }
  return "token ids in [0, " + std::to_string(options.dataset.vocab_size) + ") (" + source + ")";
}

// Runs `count` requests cycling over the dataset, untimed: fills caches and wakes the server.
void warm_up(const ServerTarget& target, const std::vector<BenchRequest>& requests, int32_t count, const LoadOptions& load) {
  if (count <= 0 || requests.empty()) return;
  std::vector<BenchRequest> warm;
  for (int32_t i = 0; i < count; ++i) warm.push_back(requests[static_cast<size_t>(i) % requests.size()]);
  LoadOptions quiet = load;
  quiet.progress = false;
  std::fprintf(stderr, "warming up with %d requests\n", count);
  run_load(target, warm, std::vector<double>(warm.size(), 0.0), quiet);
}

void print_errors(const std::vector<RequestOutcome>& outcomes) {
  std::set<std::string> shown;
  for (const RequestOutcome& o : outcomes) {
    if (o.success || shown.count(o.error) || shown.size() >= 5) continue;
    shown.insert(o.error);
    std::fprintf(stderr, "failed request: %s\n", o.error.c_str());
  }
}

// One socket per in-flight request: 1000 prompts at rate inf would hit the usual soft limit of
// 1024 open files, so take the hard limit, as far as the system allows.
void raise_open_file_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &limit);
}

void run_serve_bench(ServeBenchOptions& options) {
  TACHYON_CHECK(options.dataset_name == "random") << "--dataset-name: only 'random' is supported, got '" << options.dataset_name << "'";
  TACHYON_CHECK(options.prompt_format == "ids" || options.prompt_format == "text")
      << "--prompt-format is ids or text, got '" << options.prompt_format << "'";
  if (!options.host.empty() || options.port > 0) {
    options.target.base_url = "http://" + (options.host.empty() ? std::string("127.0.0.1") : options.host) + ":" +
                              std::to_string(options.port > 0 ? options.port : 8000);
  }
  BenchRun run;
  run.request_rate = parse_rate(options.request_rate);
  run.metric_percentiles = parse_percentiles(options.metric_percentiles);
  run.percentile_metrics = parse_metrics(options.percentile_metrics);
  run.burstiness = options.burstiness;
  run.max_concurrency = options.max_concurrency;
  run.num_prompts = options.dataset.num_prompts;
  run.command_line = options.command_line;
  options.dataset.as_text = options.prompt_format == "text";
  options.target.extra_fields = structured_request_fields(
      options.structured, options.target.endpoint.find("chat/completions") != std::string::npos, options.ignore_eos);
  const std::string prompts = resolve_model_and_vocab(options);
  const std::vector<BenchRequest> requests = make_random_requests(options.dataset);
  const std::vector<double> arrivals = arrival_times(run.num_prompts, run.request_rate, run.burstiness, options.dataset.seed);
  run.model_id = options.target.model;
  LoadOptions load{.max_concurrency = options.max_concurrency,
                   .ignore_eos = options.ignore_eos,
                   .progress = !options.no_progress && ::isatty(STDERR_FILENO)};
  std::fprintf(stderr, "bench serve: %d prompts to %s%s, model %s, request rate %s, %s\n", run.num_prompts,
               options.target.base_url.c_str(), options.target.endpoint.c_str(), run.model_id.c_str(),
               options.request_rate.c_str(), prompts.c_str());
  if (!options.target.extra_fields.empty()) {
    std::string names;
    for (const auto& [key, value] : options.target.extra_fields.items()) names += (names.empty() ? "" : ", ") + key;
    std::fprintf(stderr, "bench serve: every request carries %s\n", names.c_str());
  }
  const RequestOutcome test = send_request(options.target, requests.front(), options.ignore_eos);
  TACHYON_CHECK(test.success) << "the initial test request failed, check the options: " << test.error;
  warm_up(options.target, requests, options.num_warmups, load);

  raise_open_file_limit();
  auto spec_decode_counters = [&]() -> std::optional<SpecDecodeCounters> {
    const std::optional<std::string> text = server_metrics_text(options.target);
    return text ? parse_spec_decode_counters(*text) : std::nullopt;
  };
  const std::optional<SpecDecodeCounters> before = spec_decode_counters();
  LoadResult result = run_load(options.target, requests, arrivals, load);
  run.duration = result.duration;
  const std::optional<SpecDecodeStats> spec = spec_decode_stats(before, spec_decode_counters());
  print_errors(result.outcomes);
  const BenchSummary summary = summarize(run, result.outcomes);
  std::printf("%s", format_table(run, summary, spec ? format_spec_decode(*spec) : std::string()).c_str());
  std::fflush(stdout);
  if (options.save_result || !options.result_filename.empty()) {
    nlohmann::ordered_json json = result_json(run, summary, result.outcomes);
    if (spec) add_spec_decode_json(json, *spec);
    std::filesystem::path path = options.result_filename.empty()
                                     ? default_result_filename(run, json["date"].get<std::string>())
                                     : options.result_filename;
    if (!options.result_dir.empty()) {
      std::filesystem::create_directories(options.result_dir);
      path = std::filesystem::path(options.result_dir) / path;
    }
    std::ofstream out(path);
    TACHYON_CHECK(out.good()) << "cannot write " << path;
    out << json.dump(2) << "\n";
    std::fprintf(stderr, "result written to %s\n", path.c_str());
  }
}

}  // namespace

void add_bench_serve_command(CLI::App& bench, const std::string& command_line) {
  auto o = std::make_shared<ServeBenchOptions>();
  o->command_line = command_line;
  CLI::App* cmd = bench.add_subcommand("serve", "load-test an OpenAI-compatible server (as vllm bench serve)");
  cmd->add_option("--base-url", o->target.base_url, "server root, e.g. http://127.0.0.1:8000")->capture_default_str();
  cmd->add_option("--host", o->host, "server host (with --port, instead of --base-url)");
  cmd->add_option("--port", o->port, "server port")->check(CLI::Range(1, 65535));
  cmd->add_option("--endpoint", o->target.endpoint, "/v1/completions or /v1/chat/completions")->capture_default_str();
  cmd->add_option("--model", o->target.model, "model name sent in requests (default: the first of GET /v1/models)");
  cmd->add_option("--api-key", o->target.api_key, "sent as Authorization: Bearer");
  cmd->add_option("--dataset-name", o->dataset_name, "random (the only one)")->capture_default_str();
  cmd->add_option("--prompt-format", o->prompt_format, "ids: token ids; text: random words")->capture_default_str();
  cmd->add_option("--vocab-size", o->vocab_size,
                  "random ids are drawn in [0, vocab-size) (default: the vocab_size GET /v1/models gives, else " +
                      std::to_string(RandomDatasetOptions{}.vocab_size) + ")")
      ->check(CLI::Range(int64_t{1}, int64_t{std::numeric_limits<int32_t>::max()}));
  cmd->add_option("--random-input-len", o->dataset.input_len, "prompt tokens")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--random-output-len", o->dataset.output_len, "max tokens per request")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--random-range-ratio", o->dataset.range_ratio, "lengths uniform in [len*(1-r), len*(1+r)]")->capture_default_str();
  cmd->add_option("--random-prefix-len", o->dataset.prefix_len, "tokens shared by every prompt")->capture_default_str()->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--num-prompts", o->dataset.num_prompts, "requests to send")->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--request-rate", o->request_rate, "requests per second (inf: all at once)")->capture_default_str();
  cmd->add_option("--burstiness", o->burstiness, "gamma shape of the arrival gaps (1: Poisson)")->capture_default_str();
  cmd->add_option("--max-concurrency", o->max_concurrency, "requests in flight at most")->check(CLI::Range(1, 1 << 20));
  cmd->add_flag("--ignore-eos", o->ignore_eos, "generate exactly the output length (ignore_eos, min_tokens)");
  cmd->add_option("--seed", o->dataset.seed, "seed of the prompts and arrivals")->capture_default_str();
  cmd->add_option("--num-warmups", o->num_warmups, "untimed requests first")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--percentile-metrics", o->percentile_metrics, "comma list of ttft, tpot, itl, e2el")->capture_default_str();
  cmd->add_option("--metric-percentiles", o->metric_percentiles, "comma list, e.g. 50,90,99")->capture_default_str();
  cmd->add_flag("--save-result", o->save_result, "write the result JSON");
  cmd->add_option("--result-dir", o->result_dir, "folder of the result JSON");
  cmd->add_option("--result-filename", o->result_filename, "name of the result JSON (implies --save-result)");
  cmd->add_flag("--no-progress,--disable-tqdm", o->no_progress, "no progress line on stderr");
  cmd->add_option("--response-format", o->structured.response_format,
                  "constrain every output: json_object, or json_schema with --json-schema");
  cmd->add_option("--json-schema", o->structured.json_schema_file, "file holding the JSON schema of --response-format json_schema");
  cmd->add_option("--tools", o->structured.tools_file, "file holding OpenAI's tools array, sent with every chat request");
  cmd->add_option("--tool-choice", o->structured.tool_choice,
                  "with --tools: auto, none, required, or a function's name (required and a name force the call by grammar)");
  cmd->callback([o] { run_serve_bench(*o); });
}

}  // namespace tachyon::cli
