// Generation: what a generation route needs from a validated request (prompts, sampling, how
// chat answers are split), and chat_generation, the one place a ChatRequest becomes one: the
// chat template, tokenizing, the context check and the output parsers. The OpenAI chat route and
// the Anthropic messages route (routes_messages.cpp, which converts its body into a ChatRequest)
// both go through it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tachyon/core/sampling_params.h"
#include "tachyon/server/chat_output.h"
#include "tachyon/server/http/serving_context.h"
#include "tachyon/server/openai_protocol.h"

namespace tachyon::server {

struct Generation {
  bool chat = false;
  std::vector<std::vector<int32_t>> prompts;  // [num_prompts][prompt_len]
  std::vector<std::string> echo_texts;        // completions with echo: the prompt text per prompt
  core::SamplingParams params;
  bool stream = false;
  bool include_usage = false;
  std::string id;
  std::string model;
  int64_t created = 0;
  std::string client;               // the peer address its share of the engine is counted against
  std::string user;                 // the request's end-user id (`user`), "" when none
  ChatOutputConfig chat_output;     // chat: how answers are split into reasoning, content, calls
  bool skip_special_tokens = true;  // false when the parsers' markers are special tokens
  int64_t sequences() const { return static_cast<int64_t>(prompts.size()) * params.n; }
};

// Renders and tokenizes the request's messages; throws ApiException (400) when the model has no
// chat template, the template refuses the messages, or the prompt leaves no room.
Generation chat_generation(ServingContext& context, const ChatRequest& request);

}  // namespace tachyon::server
