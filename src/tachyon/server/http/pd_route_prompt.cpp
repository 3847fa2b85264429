#include "tachyon/server/http/pd_route_prompt.h"

#include "tachyon/base/check.h"

namespace tachyon::server {

RoutePrompt::RoutePrompt(const std::filesystem::path& model_dir) {
  TACHYON_CHECK(std::filesystem::exists(model_dir / "tokenizer.json"))
      << "--tokenizer " << model_dir.string() << " has no tokenizer.json (the prefix policy tokenizes prompts)";
  tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_dir(model_dir));
  if (!tokenizer_->chat_template().empty()) {
    chat_template_ = std::make_unique<tokenizer::ChatTemplate>(tokenizer_->chat_template(), tokenizer_->bos_token(),
                                                               tokenizer_->eos_token());
  }
}

std::vector<int32_t> RoutePrompt::tokens(bool chat, const nlohmann::json& body) const {
  if (!body.is_object()) return {};
  try {
    if (!chat) {
      const auto prompt = body.find("prompt");
      if (prompt == body.end()) return {};
      if (prompt->is_string()) return tokenizer_->encode(prompt->get<std::string>(), /*add_special_tokens=*/true);
      if (prompt->is_array() && !prompt->empty() && prompt->front().is_number_integer()) {
        return prompt->get<std::vector<int32_t>>();
      }
      return {};
    }
    if (chat_template_ == nullptr || !body.contains("messages")) return {};
    tokenizer::ChatTemplateInputs inputs;
    inputs.messages = nlohmann::ordered_json::parse(body["messages"].dump());
    if (body.contains("tools") && body.value("tool_choice", std::string("auto")) != "none") {
      inputs.tools = nlohmann::ordered_json::parse(body["tools"].dump());
    }
    inputs.add_generation_prompt = body.value("add_generation_prompt", true);
    if (body.contains("chat_template_kwargs")) inputs.extra = nlohmann::ordered_json::parse(body["chat_template_kwargs"].dump());
    return tokenizer_->encode(chat_template_->render(inputs), /*add_special_tokens=*/false);
  } catch (const std::exception&) {
    return {};
  }
}

}  // namespace tachyon::server
