// POST /v1/completions body -> CompletionRequest. The prompt comes in four shapes (string, list of
// strings, token ids, list of token-id lists); everything else is shared with chat
// (openai_request_fields.h).
#include <limits>

#include "tachyon/server/openai_protocol.h"
#include "tachyon/server/openai_request_fields.h"

namespace tachyon::server {

namespace {

using fields::Json;

constexpr int32_t kDefaultCompletionMaxTokens = 16;  // OpenAI's documented default for /v1/completions

std::vector<int32_t> read_ids(const Json& ids, const std::string& path, const ServerLimits& limits) {
  int64_t hi = limits.vocab_size > 0 ? limits.vocab_size - 1 : std::numeric_limits<int32_t>::max();
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Json& id = ids[i];
    if (!id.is_number()) {
      fields::fail(path, "Invalid type for '" + path + "[" + std::to_string(i) +
                             "]': a token-id prompt must contain only integers, but got " + fields::type_name(id) +
                             ".");
    }
    out.push_back(static_cast<int32_t>(fields::as_int(id, path, 0, hi)));
  }
  return out;
}

void read_prompt(const Json& body, const ServerLimits& limits, CompletionRequest& request) {
  const Json* prompt = fields::find(body, "prompt");
  if (prompt == nullptr) fields::fail("prompt", "'prompt' is required: a string, a list of strings, or token ids.");
  const char* empty = "'prompt' must not be empty.";
  if (prompt->is_string()) {
    if (prompt->get_ref<const std::string&>().empty()) fields::fail("prompt", empty);
    request.prompt_texts.push_back(prompt->get<std::string>());
    return;
  }
  if (!prompt->is_array()) {
    fields::fail("prompt",
                 "Invalid type for 'prompt': expected a string, a list of strings, token ids or a list of "
                 "token-id lists, but got " +
                     fields::type_name(*prompt) + ".");
  }
  if (prompt->empty()) fields::fail("prompt", empty);
  const Json& first = prompt->front();
  if (first.is_number()) {  // one prompt as token ids
    request.prompt_ids.push_back(read_ids(*prompt, "prompt", limits));
    return;
  }
  if (static_cast<int64_t>(prompt->size()) > limits.max_prompts) {
    fields::fail("prompt", "'prompt' holds " + std::to_string(prompt->size()) + " prompts; at most " +
                               std::to_string(limits.max_prompts) + " are allowed in one request.");
  }
  for (size_t i = 0; i < prompt->size(); ++i) {
    const Json& item = (*prompt)[i];
    std::string path = "prompt[" + std::to_string(i) + "]";
    if (first.is_string() && item.is_string()) {
      if (item.get_ref<const std::string&>().empty()) fields::fail("prompt", "'" + path + "' must not be empty.");
      request.prompt_texts.push_back(item.get<std::string>());
    } else if (first.is_array() && item.is_array()) {
      if (item.empty()) fields::fail("prompt", "'" + path + "' must not be empty.");
      request.prompt_ids.push_back(read_ids(item, path, limits));
    } else {
      fields::fail("prompt", "Invalid type for '" + path +
                                 "': a list prompt must hold only strings or only "
                                 "token-id lists, but got " +
                                 fields::type_name(item) + ".");
    }
  }
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view body_text, const ServerLimits& limits) {
  Json body = fields::parse_body(body_text, limits);
  fields::check_model(body, limits);
  CompletionRequest request;
  read_prompt(body, limits, request);
  if (fields::find(body, "suffix") != nullptr) {
    fields::fail("suffix", "'suffix' is not supported by this server; remove it.");
  }
  int32_t max_tokens =
      static_cast<int32_t>(fields::read_int(body, "max_tokens", "max_tokens", 1, std::numeric_limits<int32_t>::max())
                               .value_or(kDefaultCompletionMaxTokens));
  request.max_tokens = max_tokens;
  request.params.max_tokens = max_tokens;
  fields::read_sampling_fields(body, limits, request.params);
  fields::read_structured_fields(body, limits, request.params);
  fields::check_sequences(static_cast<int64_t>(request.prompt_texts.size() + request.prompt_ids.size()),
                          request.params.n, limits);
  if (auto logprobs = fields::read_int(body, "logprobs", "logprobs", 0, limits.max_logprobs)) {
    request.params.logprobs = static_cast<int32_t>(*logprobs);
  }
  request.echo = fields::read_bool(body, "echo", "echo").value_or(false);
  if (request.echo && request.params.logprobs >= 0) {
    fields::fail("echo",
                 "'echo' together with 'logprobs' is not supported (prompt logprobs are not computed); "
                 "drop one of them.");
  }
  fields::read_stream_fields(body, request.stream, request.include_usage);
  request.user = fields::read_user(body);
  fields::validate_params(request.params, limits);
  return request;
}

}  // namespace tachyon::server
