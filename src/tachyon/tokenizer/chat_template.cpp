// ChatTemplate: the variables transformers passes to a chat template; see chat_template.h.
#include "tachyon/tokenizer/chat_template.h"

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/deepseek_v32_prompt.h"
#include "tachyon/tokenizer/jinja/template.h"

namespace tachyon::tokenizer {
namespace {

std::string token_content(const nlohmann::json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  TACHYON_CHECK(it->is_object() && it->contains("content") && (*it)["content"].is_string())
      << "tokenizer_config.json: " << key << " must be a string or {\"content\": string}";
  return (*it)["content"].get<std::string>();
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source, std::string bos_token, std::string eos_token)
    : source_(std::move(source)),
      bos_token_(std::move(bos_token)),
      eos_token_(std::move(eos_token)),
      template_(std::make_unique<jinja::Template>(source_)) {}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

ChatTemplate ChatTemplate::from_tokenizer_config(const nlohmann::json& config) {
  auto it = config.find("chat_template");
  TACHYON_CHECK(it != config.end() && !it->is_null()) << "tokenizer_config.json has no chat_template";
  std::string source;
  if (it->is_string()) {
    source = it->get<std::string>();
  } else {
    TACHYON_CHECK(it->is_array()) << "chat_template must be a string or a list of {name, template}";
    for (const auto& entry : *it) {
      if (entry.value("name", "") == "default") source = entry.value("template", "");
    }
    TACHYON_CHECK(!source.empty()) << "chat_template list has no template named 'default'";
  }
  return ChatTemplate(std::move(source), token_content(config, "bos_token"),
                      token_content(config, "eos_token"));
}

ChatTemplate::ChatTemplate(Native, std::string source, std::string bos_token, std::string eos_token)
    : source_(std::move(source)), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)) {}

ChatTemplate ChatTemplate::deepseek_v32(std::string bos_token, std::string eos_token) {
  return ChatTemplate(Native{}, kDeepseekV32NativeTemplate, std::move(bos_token), std::move(eos_token));
}

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  if (template_ == nullptr) return render_deepseek_v32(inputs, bos_token_, eos_token_);
  TACHYON_CHECK(inputs.messages.is_array()) << "chat messages must be a list";
  TACHYON_CHECK(inputs.tools.is_null() || inputs.tools.is_array()) << "tools must be a list or null";
  TACHYON_CHECK(inputs.extra.is_null() || inputs.extra.is_object()) << "extra template variables must be an object";
  using jinja::Value;
  jinja::ValueDict vars;
  vars.set("bos_token", Value::from_string(bos_token_));
  vars.set("eos_token", Value::from_string(eos_token_));
  if (inputs.extra.is_object()) {
    for (const auto& [key, value] : inputs.extra.items()) {
      TACHYON_CHECK(key != "messages" && key != "tools" && key != "documents" &&
                    key != "add_generation_prompt")
          << "extra template variable '" << key << "' would replace a chat template input";
      vars.set(key, Value::from_json(value));
    }
  }
  vars.set("messages", Value::from_json(inputs.messages));
  vars.set("tools", Value::from_json(inputs.tools));
  vars.set("documents", Value::none());
  vars.set("add_generation_prompt", Value::from_bool(inputs.add_generation_prompt));
  return template_->render(vars);
}

}  // namespace tachyon::tokenizer
