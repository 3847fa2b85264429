// tachyon generate: greedy generation with the CPU reference forward, streamed to stdout.
// The prompt is tokenized with the model directory's tokenizer.json (optionally through its
// chat template); --prompt-ids bypasses the tokenizer for models that have none.
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>

#include "tachyon/base/check.h"
#include "tachyon/cli/commands.h"
#include "tachyon/model/dense_model.h"
#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/incremental_detokenizer.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::cli {
namespace {

struct GenerateOptions {
  std::string model_dir;
  std::string prompt;
  std::string prompt_ids;
  bool chat = false;
  bool ignore_eos = false;
  int64_t max_tokens = 32;
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
  const std::filesystem::path dir = options.model_dir;
  const bool has_tokenizer = std::filesystem::exists(dir / "tokenizer.json");
  TACHYON_CHECK(has_tokenizer || !options.prompt_ids.empty())
      << dir.string() << " has no tokenizer.json: pass --prompt-ids instead of --prompt";
  model::DenseModel model = model::DenseModel::load(dir);
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

  int32_t stop = -1;
  if (!options.ignore_eos && model.config().eos_token_id) stop = static_cast<int32_t>(*model.config().eos_token_id);
  std::optional<tokenizer::IncrementalDetokenizer> detokenizer;
  if (tok) detokenizer.emplace(*tok, /*skip_special_tokens=*/true);
  // Echo the prompt so the continuation reads in context; a chat reply starts on its own line.
  if (tok && options.prompt_ids.empty()) std::printf("%s%s", options.prompt.c_str(), options.chat ? "\n" : "");

  auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> generated = model::greedy_generate(model, prompt, options.max_tokens, stop, [&](int32_t id) {
    if (detokenizer) {
      std::fputs(detokenizer->push(id).c_str(), stdout);
    } else {
      std::printf("%d ", id);
    }
    std::fflush(stdout);
  });
  if (detokenizer) std::fputs(detokenizer->flush().c_str(), stdout);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\n");
  std::fprintf(stderr, "[tachyon] prompt %zu tokens, generated %zu tokens in %.2f s (%.1f tokens/s)\n", prompt.size(),
               generated.size(), seconds, generated.size() / std::max(seconds, 1e-9));
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "greedy generation with the CPU reference forward");
  cmd->add_option("model", options->model_dir, "HF model directory")->required();
  cmd->add_option("--prompt", options->prompt, "prompt text");
  cmd->add_option("--prompt-ids", options->prompt_ids, "comma-separated token ids instead of --prompt");
  cmd->add_flag("--chat", options->chat, "wrap the prompt as a user message with the chat template");
  cmd->add_flag("--ignore-eos", options->ignore_eos, "keep generating past the end-of-sequence token");
  cmd->add_option("--max-tokens", options->max_tokens, "tokens to generate")->default_val(32)->check(CLI::Range(1, 1 << 20));
  cmd->callback([options] { run_generate(*options); });
}

}  // namespace tachyon::cli
