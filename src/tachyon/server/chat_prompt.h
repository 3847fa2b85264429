// The prompt a chat request runs, in one place: the chat route and the Anthropic route build their
// generation from it (http/routes_generation.cpp), and the disaggregation router's prefix policy
// hashes the same tokens (http/pd_route_prompt.h), so that a /v1/messages body and a chat body
// route to the prefill server that holds their prefix.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tachyon/server/openai_protocol.h"
#include "tachyon/tokenizer/chat_template.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::server {

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
