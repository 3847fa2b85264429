// tachyon generate: greedy generation of one prompt through the engine (the same scheduler and
// runner as `serve`, on --device), streamed to stdout. The prompt is tokenized with the model
// directory's tokenizer.json (optionally through its chat template); --prompt-ids bypasses the
// tokenizer for models that have none.
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>

#include "tachyon/base/check.h"
#include "tachyon/cli/commands.h"
#include "tachyon/cli/default_model.h"
#include "tachyon/cli/unescape.h"
#include "tachyon/engine/engine_core.h"
#include "tachyon/app/text_stream.h"
#include "tachyon/app/runner_factory.h"
#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::cli {
namespace {

struct GenerateOptions {
  std::string model_dir;
  std::string prompt;
  std::string prompt_ids;
  bool chat = false;
  bool ignore_eos = false;
  std::vector<std::string> stop;
  int64_t max_tokens = 32;
  core::DeviceConfig device;
};

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

void run_generate(const GenerateOptions& options) {
  const std::filesystem::path dir = options.model_dir.empty() ? default_model_dir() : std::filesystem::path(options.model_dir);
  const bool has_tokenizer = std::filesystem::exists(dir / "tokenizer.json");
  TACHYON_CHECK(has_tokenizer || !options.prompt_ids.empty())
      << dir.string() << " has no tokenizer.json: pass --prompt-ids instead of --prompt";
  core::EngineConfig config;
  config.device = options.device;
  config.scheduler.max_num_seqs = 1;
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

  if (loaded.model_config.eos_token_id) config.scheduler.eos_token_id = static_cast<int32_t>(*loaded.model_config.eos_token_id);
  config.scheduler.max_model_len = static_cast<int64_t>(prompt.size()) + options.max_tokens;
  std::vector<std::string> stop;
  for (const std::string& s : options.stop) stop.push_back(unescape(s));
  std::optional<app::TextStream> text;
  if (tok) text.emplace(*tok, stop, /*include_stop_str=*/false);
  // Echo the prompt so the continuation reads in context; a chat reply starts on its own line.
  if (tok && options.prompt_ids.empty()) std::printf("%s%s", options.prompt.c_str(), options.chat ? "\n" : "");

  engine::EngineCore engine(config, std::move(loaded.runner));
  core::SamplingParams params;
  params.temperature = 0.0f;
  params.max_tokens = static_cast<int32_t>(options.max_tokens);
  params.ignore_eos = options.ignore_eos;
  size_t generated = 0;
  auto channel = std::make_shared<engine::OutputChannel>([&](engine::RequestOutput&& output) {
    for (const engine::CompletionDelta& delta : output.completions) {
      for (int32_t id : delta.token_ids) {
        ++generated;
        if (text) {
          std::fputs(text->push({&id, 1}).c_str(), stdout);
        } else {
          std::printf("%d ", id);
        }
      }
    }
    std::fflush(stdout);
  });
  auto start = std::chrono::steady_clock::now();
  engine.submit(prompt, params, channel);
  // A stop string ends the run: this process owns the engine, so it just stops stepping.
  while (!(text && text->stopped()) && engine.step()) {
  }
  if (text && !text->stopped()) std::fputs(text->finish().c_str(), stdout);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\n");
  std::fflush(stdout);  // the summary on stderr comes after the text
  std::fprintf(stderr, "[tachyon] %s: prompt %zu tokens, generated %zu tokens in %.2f s (%.1f tokens/s)\n",
               config.device.kind.c_str(), prompt.size(), generated, seconds, generated / std::max(seconds, 1e-9));
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "greedy generation of one prompt, streamed");
  cmd->add_option("model", options->model_dir, "HF model directory; none: the built-in canary model");
  cmd->add_option("--prompt", options->prompt, "prompt text");
  cmd->add_option("--prompt-ids", options->prompt_ids, "comma-separated token ids instead of --prompt");
  cmd->add_flag("--chat", options->chat, "wrap the prompt as a user message with the chat template");
  cmd->add_option("--stop", options->stop, "stop strings, not printed; \\n and \\t are unescaped (repeatable)");
  cmd->add_flag("--ignore-eos", options->ignore_eos, "keep generating past the end-of-sequence token");
  cmd->add_option("--max-tokens", options->max_tokens, "tokens to generate")->default_val(32)->check(CLI::Range(1, 1 << 20));
  add_device_options(*cmd, options->device);
  cmd->callback([options] { run_generate(*options); });
}

}  // namespace tachyon::cli
