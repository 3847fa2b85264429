// The prompt a chat request runs, in one place: the chat route and the Anthropic route build their
// generation from it (http/routes_generation.cpp), and the disaggregation router's prefix policy
// hashes the same tokens (http/pd_route_prompt.h), so that a /v1/messages body and a chat body
// route to the prefill server that holds their prefix.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tachyon/server/openai_protocol.h"
#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::server {

// The model's chat template: its tokenizer's; else, for a DeepSeek-V3.2 checkpoint (config.json
// model_type "deepseek_v32", whose release ships no Jinja template), the native V3.2 renderer
// (tokenizer/deepseek_v32_prompt.h); else null (the chat routes then refuse).
std::unique_ptr<tokenizer::ChatTemplate> model_chat_template(const tokenizer::Tokenizer& tokenizer,
                                                             const std::filesystem::path& model_dir);

struct ChatPrompt {
  std::string rendered;         // the template's text (the generation prompt included, the prefill not)
  std::vector<int32_t> tokens;  // its tokens, then the prefill's
};

// The request's messages, and its tools unless tool_choice is "none" (the model is then not told
// of them, so it cannot call them), rendered by the model's chat template and tokenized; the
// prefill's tokens follow. Throws ApiException (400 naming "messages") when the template refuses.
ChatPrompt render_chat_prompt(const tokenizer::ChatTemplate& chat_template, const tokenizer::Tokenizer& tokenizer,
                              const ChatRequest& request);

}  // namespace tachyon::server
