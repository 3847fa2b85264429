// tachyon generate: one prompt through the engine (the same scheduler and runner as `serve`, on
// --device), streamed to stdout. The prompt is tokenized with the model directory's
// tokenizer.json (optionally through its chat template); --prompt-ids bypasses the tokenizer for
// models that have none.
//
// The sampling options are the completions API's: each option is a field of a /v1/completions
// body (--top-p is top_p) that server::parse_completion_request validates, so ranges, defaults
// and error messages are the server's, and the list of options is the server's own table
// (server::fields::sampling_field_specs). Two defaults differ on purpose: temperature 0, so that
// a plain run prints the same greedy text every time, and max_tokens up to the context
// (--max-model-len), as the server's chat endpoint does, so that an answer is not cut off.
// Tests: tests/unit/test_cli.cpp.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>
#include <sstream>

#include "tachyon/base/check.h"
#include "tachyon/cli/bench_engine.h"
#include "tachyon/cli/commands.h"
#include "tachyon/cli/default_model.h"
#include "tachyon/cli/hub_cache.h"
#include "tachyon/cli/unescape.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/model/model_config.h"
#include "tachyon/app/text_stream.h"
#include "tachyon/app/runner_factory.h"
#include "tachyon/server/openai_protocol.h"
#include "tachyon/server/openai_request_fields.h"
#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::cli {
namespace {

using server::fields::FieldKind;
using server::fields::FieldSpec;

// One sampling option as typed; which member is used depends on spec.kind.
struct FieldOption {
  FieldSpec spec;
  std::string value;                // kNumber, kInteger
  std::vector<std::string> values;  // kStringList, kIntegerList
  bool flag = false;                // kFlag
  CLI::Option* option = nullptr;    // count() > 0 once given
};

struct GenerateOptions {
  std::string model_dir;
  std::string prompt;
  std::string prompt_ids;
  bool chat = false;
  int64_t max_model_len = core::SchedulerConfig{}.max_model_len;  // serve's default
  std::vector<FieldOption> fields;  // one per sampling_field_specs() entry
  core::DeviceConfig device;
  core::SpeculativeConfig speculative;
};

// What a completion needs for printing: its text so far, its tokens' logprobs, how it ended.
struct Completion {
  std::optional<app::TextStream> text;  // none without a tokenizer: ids are printed
  std::string printed;                  // n > 1: held until every completion has ended
  std::vector<core::SampledToken> logprobs;
  int64_t tokens = 0;
  std::string finish_reason;  // "" while it runs
  bool aborted = false;       // a stop string ended it and the engine was told
};

std::string flag_of(const std::string& field) {
  std::string flag = "--" + field;
  for (char& c : flag) c = c == '_' ? '-' : c;
  return flag;
}

// Differences from the API that only make sense on a command line.
std::string cli_note(const FieldSpec& spec) {
  if (spec.name == "temperature") return "default 0 here, greedy; the API's is 1";
  if (spec.name == "max_tokens") return "default: until EOS, a stop or --max-model-len";
  if (spec.name == "n") return "default 1; with n > 1 each completion is printed once finished, under a one-line header";
  if (spec.name == "logprobs") return "default none; printed after the text, one token per line";
  if (spec.kind == FieldKind::kStringList) return "repeatable; \\n and \\t are unescaped";
  if (spec.kind == FieldKind::kIntegerList) return "comma-separated";
  return "default " + spec.default_text;
}

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    try {
      ids.push_back(std::stoi(item));
    } catch (const std::exception&) {
      TACHYON_FAIL() << "--prompt-ids: '" << item << "' is not an integer (expected e.g. 1,2,3)";
    }
  }
  return ids;
}

// A number as JSON, or the text as a JSON string for the parser to refuse with its own message.
nlohmann::json number_or_text(const std::string& text) {
  nlohmann::json number = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return number.is_number() ? number : nlohmann::json(text);
}

// The /v1/completions body these options make; only the options given are in it.
nlohmann::json request_body(const GenerateOptions& options) {
  nlohmann::json body;
  body["prompt"] = options.prompt_ids.empty() ? nlohmann::json(options.prompt) : nlohmann::json(parse_ids(options.prompt_ids));
  body["temperature"] = 0;
  for (const FieldOption& f : options.fields) {
    if (f.option->count() == 0) continue;
    nlohmann::json& value = body[f.spec.name];
    switch (f.spec.kind) {
      case FieldKind::kNumber:
      case FieldKind::kInteger:
        value = number_or_text(f.value);
        break;
      case FieldKind::kFlag:
        value = f.flag;
        break;
      case FieldKind::kStringList:
        value = nlohmann::json::array();
        for (const std::string& s : f.values) value.push_back(unescape(s));
        break;
      case FieldKind::kIntegerList:
        value = nlohmann::json::array();
        for (const std::string& s : f.values) value.push_back(number_or_text(s));
        break;
    }
  }
  return body;
}

// The server's 400 as one line naming the option it came from ("--top-p: 'top_p' must be ...").
[[noreturn]] void fail_with_flag(const server::ApiError& error, const GenerateOptions& options) {
  const std::string field = error.param.substr(0, error.param.find_first_of("[."));
  std::string flag;
  for (const FieldOption& f : options.fields) {
    if (f.spec.name == field) flag = flag_of(field);
  }
  if (field == "prompt") flag = options.prompt_ids.empty() ? "--prompt" : "--prompt-ids";
  throw Error(flag.empty() ? error.message : flag + ": " + error.message);
}

// "<token>" <logprob> | "<alternative>" <logprob>, ... : texts JSON-quoted so spaces and
// newlines show; without a tokenizer the ids.
std::string logprob_lines(const std::vector<core::SampledToken>& tokens, const tokenizer::Tokenizer* tok) {
  const auto entry = [tok](int32_t id, float logprob) {
    std::string text = std::to_string(id);
    if (tok) {
      const nlohmann::json quoted = tok->decode(std::span<const int32_t>(&id, 1));
      text = quoted.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    char value[32];
    std::snprintf(value, sizeof(value), " %.4f", logprob);
    return text + value;
  };
  std::string out;
  for (const core::SampledToken& t : tokens) {
    out += entry(t.token, t.logprob);
    for (size_t i = 0; i < t.top.size(); ++i) out += (i == 0 ? " | " : ", ") + entry(t.top[i].token, t.top[i].logprob);
    out += "\n";
  }
  return out;
}

// The options as a /v1/completions request, validated by the server's parser with the server's
// limits (the vocabulary read from config.json), before any weights load. max_tokens is left
// unset when not given, as chat leaves it, to be filled up to the context.
server::CompletionRequest parse_request(const GenerateOptions& options, const server::ServerLimits& limits) {
  const nlohmann::json body = request_body(options);
  try {
    server::CompletionRequest request =
        server::parse_completion_request(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), limits);
    if (!body.contains("max_tokens")) request.max_tokens.reset();
    return request;
  } catch (const server::ApiException& e) {
    fail_with_flag(e.error(), options);
  }
}

std::vector<int32_t> tokenize_prompt(const GenerateOptions& options, const tokenizer::Tokenizer* tok,
                                     const std::filesystem::path& dir) {
  std::vector<int32_t> prompt;
  if (!options.prompt_ids.empty()) {
    prompt = parse_ids(options.prompt_ids);
  } else if (options.chat) {
    TACHYON_CHECK(!tok->chat_template().empty()) << dir.string() << " has no chat_template in tokenizer_config.json";
    tokenizer::ChatTemplate chat_template(tok->chat_template(), tok->bos_token(), tok->eos_token());
    tokenizer::ChatTemplateInputs inputs;
    inputs.messages = nlohmann::json::array({{{"role", "user"}, {"content", options.prompt}}});
    inputs.add_generation_prompt = true;
    // The template writes the special tokens itself, as transformers' apply_chat_template does.
    prompt = tok->encode(chat_template.render(inputs), /*add_special_tokens=*/false);
  } else {
    prompt = tok->encode(options.prompt, /*add_special_tokens=*/true);
  }
  TACHYON_CHECK(!prompt.empty()) << "the prompt is empty";
  return prompt;
}

// Applies one delta to its completion and returns the text it adds. Called on the engine's step.
std::string take_delta(Completion& c, const engine::CompletionDelta& delta) {
  c.tokens += static_cast<int64_t>(delta.token_ids.size());
  c.logprobs.insert(c.logprobs.end(), delta.logprobs.begin(), delta.logprobs.end());
  std::string piece;
  if (c.text) {
    piece = c.text->push(delta.token_ids);
  } else {
    for (int32_t id : delta.token_ids) piece += std::to_string(id) + " ";
  }
  if (c.text && c.text->stopped()) {
    c.finish_reason = "stop";
  } else if (delta.finish_reason != engine::FinishReason::kNone) {
    if (c.text) piece += c.text->finish();
    c.finish_reason = engine::finish_reason_name(delta.finish_reason);
  }
  return piece;
}

// Steps until every completion has ended. A stop string ends a completion in the text: the
// engine is told to drop it, and once all have ended this process, which owns the engine, just
// stops stepping.
void step_to_end(engine::EngineCore& engine, int64_t request_id, std::vector<Completion>& completions) {
  while (engine.step()) {
    bool running = false;
    for (size_t i = 0; i < completions.size(); ++i) {
      Completion& c = completions[i];
      running = running || c.finish_reason.empty();
      if (c.text && c.text->stopped() && !c.aborted) {
        engine.abort(request_id, static_cast<int32_t>(i));
        c.aborted = true;
      }
    }
    if (!running) return;
  }
}

// After the stream: n > 1 completions under their headers, and the logprobs of each.
void print_completions(const std::vector<Completion>& completions, const core::SamplingParams& params,
                       const tokenizer::Tokenizer* tok) {
  for (size_t i = 0; i < completions.size(); ++i) {
    const Completion& c = completions[i];
    if (params.n > 1) {
      std::printf("--- completion %zu of %d (%s, %lld tokens) ---\n%s", i + 1, params.n, c.finish_reason.c_str(),
                  static_cast<long long>(c.tokens), c.printed.c_str());
    }
    std::printf("\n");
    if (params.logprobs == 0) std::printf("--- logprobs: token logprob ---\n");
    if (params.logprobs > 0) std::printf("--- logprobs: token logprob | %d most likely ---\n", params.logprobs);
    if (params.logprobs >= 0) std::fputs(logprob_lines(c.logprobs, tok).c_str(), stdout);
  }
}

void run_generate(const GenerateOptions& options) {
  const std::filesystem::path dir = options.model_dir.empty() ? default_model_dir() : resolve_model(options.model_dir).dir;
  const bool has_tokenizer = std::filesystem::exists(dir / "tokenizer.json");
  TACHYON_CHECK(has_tokenizer || !options.prompt_ids.empty())
      << dir.string() << " has no tokenizer.json: pass --prompt-ids instead of --prompt";
  server::ServerLimits limits;
  limits.max_model_len = options.max_model_len;
  limits.vocab_size = model::ModelConfig::from_dir(dir).vocab_size;
  const server::CompletionRequest request = parse_request(options, limits);
  core::SamplingParams params = request.params;
  core::EngineConfig config;
  config.device = options.device;
  config.speculative = options.speculative;
  config.scheduler.max_num_seqs = params.n;
  config.scheduler.max_model_len = options.max_model_len;
  if (config.device.node_rank > 0) {  // another node of a multi-node TP group: follow node 0
    std::fprintf(stderr, "[tachyon] node %d of %d: following node 0 at %s:%d\n", config.device.node_rank,
                 config.device.nnodes, config.device.master_addr.c_str(), config.device.master_port);
    app::run_follower_node(dir, config);
    std::fprintf(stderr, "[tachyon] node %d: node 0 stopped\n", config.device.node_rank);
    return;
  }
  app::LoadedRunner loaded = app::load_runner(dir, config);
  std::optional<tokenizer::Tokenizer> tok;
  if (has_tokenizer) tok = tokenizer::Tokenizer::from_dir(dir);
  const std::vector<int32_t> prompt = tokenize_prompt(options, tok ? &*tok : nullptr, dir);
  try {
    params.max_tokens = server::resolve_max_tokens(static_cast<int64_t>(prompt.size()), request.max_tokens, limits);
  } catch (const server::ApiException& e) {
    throw Error(e.error().message + " (--max-model-len sets the context)");
  }
  if (loaded.model_config.eos_token_id) config.scheduler.eos_token_id = static_cast<int32_t>(*loaded.model_config.eos_token_id);

  std::vector<Completion> completions(static_cast<size_t>(params.n));
  for (Completion& c : completions) {
    if (tok) c.text.emplace(*tok, params.stop, params.include_stop_str_in_output, /*skip_special_tokens=*/true, params.min_tokens);
  }
  // Echo the prompt so the continuation reads in context; a chat reply, or a list of
  // completions, starts on its own line.
  if (tok && options.prompt_ids.empty()) std::printf("%s%s", options.prompt.c_str(), options.chat || params.n > 1 ? "\n" : "");
  engine::EngineCore engine(config, std::move(loaded.runner), std::move(loaded.drafter));
  size_t generated = 0;
  auto channel = std::make_shared<engine::OutputChannel>([&](engine::RequestOutput&& output) {
    for (const engine::CompletionDelta& delta : output.completions) {
      Completion& c = completions[static_cast<size_t>(delta.index)];
      if (!c.finish_reason.empty()) continue;  // ended by a stop string; the abort is on its way
      generated += delta.token_ids.size();
      const std::string piece = take_delta(c, delta);
      if (params.n == 1) std::fputs(piece.c_str(), stdout);  // n > 1: printed once all have ended
      if (params.n > 1) c.printed += piece;
    }
    std::fflush(stdout);
  });
  auto start = std::chrono::steady_clock::now();
  step_to_end(engine, engine.submit(prompt, params, channel), completions);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  print_completions(completions, params, tok ? &*tok : nullptr);
  std::fflush(stdout);  // the summary on stderr comes after the text
  std::fprintf(stderr, "[tachyon] %s: prompt %zu tokens, generated %zu tokens in %.2f s (%.1f tokens/s)\n",
               config.device.kind.c_str(), prompt.size(), generated, seconds, generated / std::max(seconds, 1e-9));
  const std::string speculative = speculative_line(speculative_summary(config.speculative, {}, engine.stats()));
  if (!speculative.empty()) std::fprintf(stderr, "[tachyon] %s", speculative.c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "generate from one prompt, streamed; sampling options as in the completions API");
  cmd->add_option("model", options->model_dir, "HF model directory or hub id (Org/Name) in the local HF cache; none: the built-in canary model");
  cmd->add_option("--prompt", options->prompt, "prompt text");
  cmd->add_option("--prompt-ids", options->prompt_ids, "comma-separated token ids instead of --prompt");
  cmd->add_flag("--chat", options->chat, "wrap the prompt as a user message with the chat template");
  cmd->add_option("--max-model-len", options->max_model_len, "prompt + output tokens")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 24));
  for (FieldSpec& spec : server::fields::sampling_field_specs(server::ServerLimits{})) {
    options->fields.push_back({.spec = std::move(spec)});
  }
  for (FieldOption& f : options->fields) {  // the vector no longer grows: the references hold
    const std::string flag = flag_of(f.spec.name);
    const std::string help = f.spec.help + " (" + cli_note(f.spec) + ")";
    switch (f.spec.kind) {
      case FieldKind::kNumber:
        f.option = cmd->add_option(flag, f.value, help)->type_name("NUMBER");
        break;
      case FieldKind::kInteger:
        f.option = cmd->add_option(flag, f.value, help)->type_name("INT");
        break;
      case FieldKind::kFlag:
        f.option = cmd->add_flag(flag, f.flag, help);
        break;
      case FieldKind::kStringList:
        f.option = cmd->add_option(flag, f.values, help);
        break;
      case FieldKind::kIntegerList:
        f.option = cmd->add_option(flag, f.values, help)->delimiter(',')->type_name("INT,...");
        break;
    }
  }
  add_device_options(*cmd, options->device);
  add_speculative_options(*cmd, options->speculative);
  cmd->callback([options] { run_generate(*options); });
}

}  // namespace tachyon::cli
