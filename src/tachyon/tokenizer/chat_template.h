// ChatTemplate: renders the `chat_template` of an HF tokenizer_config.json the way transformers'
// apply_chat_template does, byte for byte: same variables (messages, tools, documents,
// add_generation_prompt, bos_token, eos_token, extra kwargs such as enable_thinking) and the
// same Jinja environment (see jinja/lexer.h for whitespace, jinja/filters.h for tojson).
// The inputs use nlohmann::ordered_json so tool schemas keep the key order the request gave:
// tojson prints keys in that order and the prompt must match transformers'. A plain
// nlohmann::json converts implicitly (its keys then come sorted).
// Tested by tests/unit/test_chat_template.cpp against renderings made with transformers on the
// GPU machine (tools/chat_reference.py) and with jinja2 (tools/chat_reference_jinja2.py).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace tachyon::tokenizer {

namespace jinja {
class Template;
}

struct ChatTemplateInputs {
  // [{"role": ..., "content": ..., "tool_calls"?: ..., "reasoning_content"?: ...}]
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools = nullptr;  // list of OpenAI tool schemas, or null
  bool add_generation_prompt = false;
  // Extra template variables, e.g. {"enable_thinking": false}; may not redefine the four above.
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
};

class ChatTemplate {
 public:
  // Parses once; throws tachyon::Error with line and column on syntax errors.
  ChatTemplate(std::string source, std::string bos_token, std::string eos_token);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // From a parsed tokenizer_config.json: chat_template as a string or as a list of
  // {"name", "template"} (the one named "default"); bos/eos_token as a string or {"content"}.
  static ChatTemplate from_tokenizer_config(const nlohmann::json& config);
  // DeepSeek-V3.2's prompt, rendered natively (deepseek_v32_prompt.h): its release has no Jinja
  // template. source() is kDeepseekV32NativeTemplate.
  static ChatTemplate deepseek_v32(std::string bos_token, std::string eos_token);

  // Throws tachyon::Error on raise_exception in the template or on runtime type errors
  // (e.g. a message without the field the template needs). Const and free of shared mutable
  // state, so HTTP threads may render through one ChatTemplate at the same time.
  std::string render(const ChatTemplateInputs& inputs) const;

  const std::string& source() const { return source_; }

 private:
  struct Native {};  // deepseek_v32(): no Jinja source to parse
  ChatTemplate(Native, std::string source, std::string bos_token, std::string eos_token);

  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
  std::unique_ptr<jinja::Template> template_;  // null for a native renderer
};

}  // namespace tachyon::tokenizer
