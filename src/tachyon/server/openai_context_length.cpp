// The context-length check, run by the server once the prompt is tokenized (parsing cannot know
// the prompt's length in tokens). Messages follow vLLM's, so clients that match on them keep working.
#include <algorithm>
#include <limits>

#include "tachyon/server/openai_protocol.h"

namespace tachyon::server {

namespace {

ApiError context_error(std::string message) {
  ApiError error = bad_request("messages", std::move(message));
  error.code = "context_length_exceeded";
  return error;
}

}  // namespace

void check_context(int64_t prompt_tokens, std::optional<int32_t> max_tokens, const ServerLimits& limits) {
  std::string head = "This model's maximum context length is " + std::to_string(limits.max_model_len) + " tokens. ";
  if (max_tokens) {
    if (prompt_tokens + *max_tokens > limits.max_model_len) {
      throw ApiException(context_error(head + "However, you requested " + std::to_string(prompt_tokens + *max_tokens) +
                                       " tokens (" + std::to_string(prompt_tokens) + " in the messages, " +
                                       std::to_string(*max_tokens) +
                                       " in the completion). Please reduce the length of the messages or completion."));
    }
  } else if (prompt_tokens >= limits.max_model_len) {
    throw ApiException(context_error(head + "However, your request has " + std::to_string(prompt_tokens) +
                                     " input tokens, which leaves no room for the completion. Please reduce the "
                                     "length of the input messages."));
  }
}

int32_t resolve_max_tokens(int64_t prompt_tokens, std::optional<int32_t> max_tokens, const ServerLimits& limits) {
  check_context(prompt_tokens, max_tokens, limits);
  if (max_tokens) return *max_tokens;
  int64_t room = limits.max_model_len - prompt_tokens;
  return static_cast<int32_t>(std::min<int64_t>(room, std::numeric_limits<int32_t>::max()));
}

}  // namespace tachyon::server
