// bench_structured_masks: what structured outputs cost the engine thread per step, on the CPU.
//   bin/bench_structured_masks [--tokenizer DIR] [--schema FILE] [--batch 64] [--steps 300] [--threads N]
//   bin/bench_structured_masks --corpus tests/data/structured/schema_corpus.json [--json OUT]
// Three figures, each the median of its runs, with the vocabulary of --tokenizer (default Llama-3,
// 128K tokens) and the JSON schema in --schema (default the user record below):
//   1. vocabulary: building the byte trie once per tokenizer (server start-up).
//   2. first mask of a new schema: compile + the first mask with cold caches (the issue asks
//      <= 50 ms), the slowest single mask of a cold random walk, and a cold mask inside a string
//      (the costliest kind of state: most of the vocabulary may follow).
//   3. steady state at batch `--batch`: per step, every sequence's mask (engine::attach_token_masks,
//      as the engine does after schedule(), OpenMP over the batch) and its matcher's advance by one
//      token; sequences walk the schema at random (short tokens preferred, so they go through
//      structure) and restart when the grammar may end, so the mask cache is warm as in serving.
// Compare figure 3 with the model's step time at the same batch (tachyon bench latency / serve):
// the issue's bound is 5% of it.
// --corpus FILE: figure 2's compile + first mask alone, for every accepted schema of a corpus file
// (the corpus test's format), each the median of 5 fresh compilers; prints and, with --json,
// writes the median and the max over the schemas (scripts/gpu-bench-structured.sh reads it).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>

#include "tachyon/engine/structured_masks.h"
#include "tachyon/structured/grammar_compiler.h"
#include "tachyon/structured/matcher.h"
#include "tachyon/tokenizer/tokenizer.h"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

using namespace tachyon;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}
double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

const char* kSchema = R"({"type":"object","properties":{
  "id":{"type":"integer"},"name":{"type":"string"},"email":{"type":"string"},
  "active":{"type":"boolean"},"score":{"type":"number"},
  "role":{"enum":["admin","user","guest"]},
  "tags":{"type":"array","items":{"type":"string"},"maxItems":4},
  "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},"zip":{"type":"string","pattern":"[0-9]{5}"}},"required":["city"]}},
  "required":["id","name","active","role","tags"]})";

// A token among those `mask` allows (short ones 3 times in 4), or -1 when none.
int32_t pick(const structured::TokenMask& mask, const structured::TokenVocabulary& v, std::mt19937_64& rng) {
  std::vector<int32_t> all, short_ones;
  for (size_t w = 0; w < mask.words.size(); ++w) {
    for (uint32_t bits = mask.words[w]; bits != 0; bits &= bits - 1) {
      const int32_t id = static_cast<int32_t>(w * 32 + static_cast<size_t>(__builtin_ctz(bits)));
      all.push_back(id);
      if (v.token_bytes(id).size() <= 2) short_ones.push_back(id);
    }
  }
  if (all.empty()) return -1;
  const auto& pool = (!short_ones.empty() && rng() % 4 != 0) ? short_ones : all;
  return pool[rng() % pool.size()];
}

// Compile + first mask of a new schema: a fresh compiler (nothing cached), median of `runs`.
double first_mask_ms(const std::shared_ptr<const structured::TokenVocabulary>& vocabulary,
                     const structured::ConstraintSpec& spec, int runs) {
  std::vector<double> ms;
  for (int r = 0; r < runs; ++r) {
    structured::GrammarCompiler compiler(vocabulary);
    const auto start = Clock::now();
    structured::Matcher m(compiler.compile(spec));
    m.next_mask();
    ms.push_back(ms_since(start));
  }
  return median(ms);
}

// --corpus: every accepted schema's compile + first mask; 0 on success.
int time_corpus(const std::shared_ptr<const structured::TokenVocabulary>& vocabulary, const std::string& corpus_file,
                const std::string& json_file) {
  std::ifstream in(corpus_file);
  const nlohmann::ordered_json corpus = nlohmann::ordered_json::parse(in, nullptr, false);
  if (corpus.is_discarded() || !corpus.contains("accepted")) {
    std::fprintf(stderr, "%s: not a schema corpus (a JSON object with an 'accepted' list)\n", corpus_file.c_str());
    return 1;
  }
  nlohmann::ordered_json per_schema = nlohmann::ordered_json::object();
  std::vector<double> all;
  for (const auto& entry : corpus["accepted"]) {
    const std::string name = entry["name"].get<std::string>();
    const structured::ConstraintSpec spec{structured::ConstraintSpec::Kind::kJsonSchema, entry["schema"].dump(), {}, "json_schema"};
    const double ms = first_mask_ms(vocabulary, spec, 5);
    per_schema[name] = ms;
    all.push_back(ms);
  }
  const double worst = *std::max_element(all.begin(), all.end());
  std::printf("compile + first mask over %zu schemas: median %.3f ms, max %.3f ms\n", all.size(), median(all), worst);
  if (!json_file.empty()) {
    const nlohmann::ordered_json out = {{"schemas", all.size()},
                                        {"compile_and_first_mask_ms_median", median(all)},
                                        {"compile_and_first_mask_ms_max", worst},
                                        {"per_schema_ms", per_schema}};
    std::ofstream(json_file) << out.dump(1) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Structured outputs: token-mask cost on the host"};
  std::string tokenizer_dir = std::string(TACHYON_SOURCE_DIR) + "/third_party/tokenizers/models/llama3";
  int batch = 64, steps = 300, threads = 0;
  std::string schema_file, corpus_file, json_file;
  app.add_option("--tokenizer", tokenizer_dir, "folder with tokenizer.json");
  app.add_option("--schema", schema_file, "file holding the JSON schema to time (default: a user record)");
  app.add_option("--batch", batch, "sequences per step");
  app.add_option("--steps", steps, "steps of the steady-state run");
  app.add_option("--threads", threads, "OpenMP threads for the batch's masks (0: the default)");
  app.add_option("--corpus", corpus_file, "time only compile + first mask, over every accepted schema of this corpus file");
  app.add_option("--json", json_file, "with --corpus: write the figures to this file");
  CLI11_PARSE(app, argc, argv);
#ifdef _OPENMP
  if (threads > 0) omp_set_num_threads(threads);
  const int used_threads = omp_get_max_threads();
#else
  const int used_threads = 1;
#endif
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_dir(tokenizer_dir);
  const int32_t eos = tok.eos_id().value_or(0);

  // 1. The vocabulary.
  std::vector<double> build_ms;
  std::shared_ptr<const structured::TokenVocabulary> vocabulary;
  for (int r = 0; r < 3; ++r) {
    const auto start = Clock::now();
    vocabulary = structured::TokenVocabulary::from_tokenizer(tok, tok.vocab_size());
    build_ms.push_back(ms_since(start));
  }
  std::printf("vocabulary: %d tokens, %d trie nodes, built in %.1f ms\n", tok.vocab_size(), vocabulary->num_nodes(),
              median(build_ms));
  if (!corpus_file.empty()) return time_corpus(vocabulary, corpus_file, json_file);

  // 2. First mask of a new schema (fresh compiler: nothing cached), and the slowest cold mask.
  std::string schema_text = kSchema;
  if (!schema_file.empty()) {
    std::ifstream in(schema_file);
    if (!in) {
      std::fprintf(stderr, "cannot read the schema file %s\n", schema_file.c_str());
      return 1;
    }
    schema_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const structured::ConstraintSpec spec{structured::ConstraintSpec::Kind::kJsonSchema, schema_text, {}, "json_schema"};
  try {
    build_grammar(spec);
  } catch (const structured::StructuredError& e) {
    std::fprintf(stderr, "%s: %s\n", schema_file.c_str(), e.what());
    return 1;
  }
  std::vector<double> first_ms, slowest_ms, string_ms;
  for (int r = 0; r < 5; ++r) {
    structured::GrammarCompiler compiler(vocabulary);
    auto start = Clock::now();
    auto grammar = compiler.compile(spec);
    structured::Matcher m(grammar);
    auto mask = m.next_mask();
    first_ms.push_back(ms_since(start));
    std::mt19937_64 rng(r);
    double slowest = 0.0;
    for (int step = 0; step < 60; ++step) {
      const int32_t token = pick(*mask, *vocabulary, rng);
      if (token < 0 || !m.accept_token(token)) break;
      start = Clock::now();
      mask = m.next_mask();
      slowest = std::max(slowest, ms_since(start));
    }
    slowest_ms.push_back(slowest);
    // The costliest kind of state: inside a string, where most of the vocabulary may follow (a
    // string schema of its own, so any --schema gets the same figure).
    structured::Matcher in_string(
        compiler.compile({structured::ConstraintSpec::Kind::kJsonSchema, R"({"type":"string"})", {}, "json_schema"}));
    if (!in_string.accept_bytes(R"("a)")) {
      std::fprintf(stderr, "internal: the schema refused its string prefix\n");
      return 1;
    }
    start = Clock::now();
    in_string.next_mask();
    string_ms.push_back(ms_since(start));
  }
  std::printf("new schema: compile + first mask %.2f ms (median of 5); slowest cold mask in a random walk %.2f ms; "
              "cold mask inside a string %.2f ms\n", median(first_ms), median(slowest_ms), median(string_ms));

  // 3. Steady state at `batch`.
  structured::GrammarCompiler compiler(vocabulary);
  core::SamplingParams params;
  params.structured = compiler.compile(spec);
  auto shared_params = std::make_shared<const core::SamplingParams>(params);
  std::vector<engine::Sequence> sequences(static_cast<size_t>(batch));
  std::unordered_map<int64_t, engine::Sequence*> by_id;
  for (int i = 0; i < batch; ++i) {
    engine::Sequence& s = sequences[static_cast<size_t>(i)];
    s.id = i;
    s.params = shared_params;
    s.matcher = engine::make_matcher(params);
    by_id[i] = &s;
  }
  std::vector<std::mt19937_64> rngs;
  for (int i = 0; i < batch; ++i) rngs.emplace_back(1000 + static_cast<uint64_t>(i));
  std::vector<double> mask_ms, hit_ms, advance_ms;
  int64_t restarts = 0;
  for (int step = 0; step < steps; ++step) {
    core::StepPlan plan;
    for (int i = 0; i < batch; ++i) {
      core::ScheduledSequence entry;
      entry.sequence_id = i;
      entry.sample = true;
      entry.params = shared_params;
      plan.sequences.push_back(std::move(entry));
    }
    auto start = Clock::now();
    engine::attach_token_masks(plan, by_id, eos);
    mask_ms.push_back(ms_since(start));
    start = Clock::now();
    engine::attach_token_masks(plan, by_id, eos);  // the same states again: every mask a cache hit
    hit_ms.push_back(ms_since(start));
    // The sampler's stand-in: a random allowed token (not timed), then the matchers' advance.
    std::vector<int32_t> tokens(static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) {
      structured::TokenMask view;
      view.words = *plan.sequences[static_cast<size_t>(i)].allowed_tokens;
      tokens[static_cast<size_t>(i)] = pick(view, *vocabulary, rngs[static_cast<size_t>(i)]);
    }
    start = Clock::now();
    for (int i = 0; i < batch; ++i) {
      engine::Sequence& s = sequences[static_cast<size_t>(i)];
      const int32_t token = tokens[static_cast<size_t>(i)];
      if (token == eos || token < 0 || !s.matcher->accept_token(token)) {
        s.matcher = engine::make_matcher(params);  // the request ended: a new one takes its place
        ++restarts;
      }
    }
    advance_ms.push_back(ms_since(start));
  }
  std::printf("batch %d, %d steps, %d threads: masks per step median %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms; "
              "advance per step median %.3f ms; all hits (the same states again) median %.3f ms; %lld completed outputs; "
              "%zu masks cached\n",
              batch, steps, used_threads, median(mask_ms), percentile(mask_ms, 0.9), percentile(mask_ms, 0.99),
              percentile(mask_ms, 1.0), median(advance_ms), median(hit_ms), static_cast<long long>(restarts),
              params.structured->cached_masks());
  return 0;
}
