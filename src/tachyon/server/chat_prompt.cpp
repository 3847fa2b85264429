#include "tachyon/server/chat_prompt.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "tachyon/base/check.h"
#include "tachyon/server/openai_errors.h"
#include "tachyon/server/openai_request_fields.h"

namespace tachyon::server {

std::unique_ptr<tokenizer::ChatTemplate> model_chat_template(const tokenizer::Tokenizer& tokenizer,
                                                             const std::filesystem::path& model_dir) {
  if (!tokenizer.chat_template().empty()) {
    return std::make_unique<tokenizer::ChatTemplate>(tokenizer.chat_template(), tokenizer.bos_token(),
                                                     tokenizer.eos_token());
  }
  std::ifstream config_file(model_dir / "config.json");
  const nlohmann::json config = nlohmann::json::parse(config_file, nullptr, /*allow_exceptions=*/false);
  if (config.is_object() && config.value("model_type", "") == "deepseek_v32") {
    return std::make_unique<tokenizer::ChatTemplate>(
        tokenizer::ChatTemplate::deepseek_v32(tokenizer.bos_token(), tokenizer.eos_token()));
  }
  return nullptr;
}

ChatPrompt render_chat_prompt(const tokenizer::ChatTemplate& chat_template, const tokenizer::Tokenizer& tokenizer,
                              const ChatRequest& request) {
  tokenizer::ChatTemplateInputs inputs;
  inputs.messages = request.messages;
  inputs.tools = request.tool_choice == ToolChoice::kNone ? nlohmann::ordered_json(nullptr) : request.tools;
  inputs.add_generation_prompt = request.add_generation_prompt;
  inputs.extra = request.chat_template_kwargs;
  ChatPrompt prompt;
  try {
    prompt.rendered = chat_template.render(inputs);
  } catch (const Error& e) {
    throw ApiException(
        bad_request("messages", "the chat template refused these messages: " + fields::user_message(e)));
  }
  prompt.tokens = tokenizer.encode(prompt.rendered, /*add_special_tokens=*/false);
  if (!request.prefill.empty()) {
    // The prefill after the generation prompt: vLLM's continue_final_message renders the final
    // assistant turn and cuts it after its text, which for the templates served here (ChatML,
    // Llama 3, DeepSeek, Qwen3 with its reasoning closed) is the same prompt, since the generation
    // prompt is how they open an assistant turn. Tokenized on its own: the generation prompt ends
    // in a special token or a newline, where byte-level BPE splits anyway.
    const std::vector<int32_t> ids = tokenizer.encode(request.prefill, /*add_special_tokens=*/false);
    prompt.tokens.insert(prompt.tokens.end(), ids.begin(), ids.end());
  }
  return prompt;
}

}  // namespace tachyon::server
