#include "tachyon/server/openai_responses.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "tachyon/server/openai_errors.h"

namespace tachyon::server {

namespace {

using Json = nlohmann::ordered_json;

// The shortest decimal that reads back as `value`, as a double; -inf (and NaN) -> -9999.0.
double clean_logprob(float value) {
  if (!std::isfinite(value)) return value > 0 ? 0.0 : -9999.0;
  if (value < -9999.0f) return -9999.0;
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer) - 1, value);
  *end = '\0';
  return std::strtod(buffer, nullptr);
}

Json string_or_null(const std::optional<std::string>& value) {
  if (!value || value->empty()) return nullptr;
  return to_valid_utf8(*value);
}

int64_t code_points(std::string_view text) {
  int64_t count = 0;
  for (unsigned char c : text) count += (c & 0xC0) != 0x80;
  return count;
}

std::string sampled_text(const LogprobsDelta& logprobs, size_t i, const TokenTextFn& token_text) {
  if (i < logprobs.texts.size()) return logprobs.texts[i];
  if (token_text) return token_text(logprobs.tokens[i].token);
  return "token_id:" + std::to_string(logprobs.tokens[i].token);
}

std::string alternative_text(const LogprobsDelta& logprobs, size_t i, int32_t token, const TokenTextFn& token_text) {
  if (token == logprobs.tokens[i].token) return sampled_text(logprobs, i, token_text);
  if (token_text) return token_text(token);
  return "token_id:" + std::to_string(token);
}

Json bytes_of(const std::string& text) {
  Json bytes = Json::array();
  for (unsigned char c : text) bytes.push_back(static_cast<int>(c));
  return bytes;
}

Json header(std::string_view id, std::string_view object, int64_t created, std::string_view model) {
  Json j;
  j["id"] = to_valid_utf8(id);
  j["object"] = object;
  j["created"] = created;
  j["model"] = to_valid_utf8(model);
  return j;
}

LogprobsDelta delta_of(const CompletionChoiceResult& choice) {
  return LogprobsDelta{.tokens = *choice.logprobs, .texts = choice.token_texts, .text_offset = 0};
}

}  // namespace

Json usage_json(const Usage& usage) {
  Json j;
  j["prompt_tokens"] = usage.prompt_tokens;
  j["completion_tokens"] = usage.completion_tokens;
  j["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  j["prompt_tokens_details"] = {{"cached_tokens", usage.cached_tokens}};
  if (usage.reasoning_tokens) j["completion_tokens_details"] = {{"reasoning_tokens", *usage.reasoning_tokens}};
  return j;
}

Json completion_logprobs(const LogprobsDelta& logprobs, const TokenTextFn& token_text) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(), offsets = Json::array();
  int64_t offset = logprobs.text_offset;
  for (size_t i = 0; i < logprobs.tokens.size(); ++i) {
    const core::SampledToken& sampled = logprobs.tokens[i];
    std::string text = to_valid_utf8(sampled_text(logprobs, i, token_text));
    tokens.push_back(text);
    token_logprobs.push_back(clean_logprob(sampled.logprob));
    Json top = Json::object();
    for (const core::TokenLogprob& alt : sampled.top) {
      std::string alt_text = to_valid_utf8(alternative_text(logprobs, i, alt.token, token_text));
      if (!top.contains(alt_text)) top[alt_text] = clean_logprob(alt.logprob);
    }
    if (!top.contains(text)) top[text] = clean_logprob(sampled.logprob);
    top_logprobs.push_back(std::move(top));
    offsets.push_back(offset);
    offset += code_points(text);
  }
  Json j;
  j["tokens"] = std::move(tokens);
  j["token_logprobs"] = std::move(token_logprobs);
  j["top_logprobs"] = std::move(top_logprobs);
  j["text_offset"] = std::move(offsets);
  return j;
}

Json chat_logprobs(const LogprobsDelta& logprobs, const TokenTextFn& token_text) {
  Json content = Json::array();
  for (size_t i = 0; i < logprobs.tokens.size(); ++i) {
    const core::SampledToken& sampled = logprobs.tokens[i];
    std::string raw = sampled_text(logprobs, i, token_text);
    Json entry;
    entry["token"] = to_valid_utf8(raw);
    entry["logprob"] = clean_logprob(sampled.logprob);
    entry["bytes"] = bytes_of(raw);
    Json top = Json::array();
    for (const core::TokenLogprob& alt : sampled.top) {
      std::string alt_raw = alternative_text(logprobs, i, alt.token, token_text);
      Json alt_entry;
      alt_entry["token"] = to_valid_utf8(alt_raw);
      alt_entry["logprob"] = clean_logprob(alt.logprob);
      alt_entry["bytes"] = bytes_of(alt_raw);
      top.push_back(std::move(alt_entry));
    }
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  Json j;
  j["content"] = std::move(content);
  return j;
}

Json completion_response(std::string_view id, int64_t created, std::string_view model,
                         const std::vector<CompletionChoiceResult>& choices, const Usage& usage,
                         const TokenTextFn& token_text) {
  Json j = header(id, "text_completion", created, model);
  Json list = Json::array();
  for (const CompletionChoiceResult& choice : choices) {
    Json c;
    c["index"] = choice.index;
    c["text"] = to_valid_utf8(choice.text);
    c["logprobs"] = choice.logprobs ? completion_logprobs(delta_of(choice), token_text) : Json(nullptr);
    c["finish_reason"] = string_or_null(choice.finish_reason);
    if (!choice.abort_reason.empty()) c["abort_reason"] = to_valid_utf8(choice.abort_reason);
    list.push_back(std::move(c));
  }
  j["choices"] = std::move(list);
  j["usage"] = usage_json(usage);
  return j;
}

Json chat_response(std::string_view id, int64_t created, std::string_view model,
                   const std::vector<CompletionChoiceResult>& choices, const Usage& usage,
                   const TokenTextFn& token_text) {
  Json j = header(id, "chat.completion", created, model);
  Json list = Json::array();
  for (const CompletionChoiceResult& choice : choices) {
    Json c;
    c["index"] = choice.index;
    Json message;
    message["role"] = "assistant";
    message["content"] = choice.tool_calls.empty() || !choice.text.empty() ? Json(to_valid_utf8(choice.text)) : Json(nullptr);
    if (!choice.reasoning.empty()) message["reasoning_content"] = to_valid_utf8(choice.reasoning);
    if (!choice.tool_calls.empty()) {
      Json calls = Json::array();
      for (const ToolCall& call : choice.tool_calls) {
        Json function;
        function["name"] = to_valid_utf8(call.name);
        function["arguments"] = to_valid_utf8(call.arguments);
        Json j;
        j["id"] = to_valid_utf8(call.id);
        j["type"] = "function";
        j["function"] = std::move(function);
        calls.push_back(std::move(j));
      }
      message["tool_calls"] = std::move(calls);
    }
    c["message"] = std::move(message);
    c["logprobs"] = choice.logprobs ? chat_logprobs(delta_of(choice), token_text) : Json(nullptr);
    c["finish_reason"] = string_or_null(choice.finish_reason);
    if (!choice.abort_reason.empty()) c["abort_reason"] = to_valid_utf8(choice.abort_reason);
    list.push_back(std::move(c));
  }
  j["choices"] = std::move(list);
  j["usage"] = usage_json(usage);
  return j;
}

Json completion_chunk(std::string_view id, int64_t created, std::string_view model, int32_t index,
                      std::string_view text, const LogprobsDelta* logprobs, std::optional<std::string> finish_reason,
                      const TokenTextFn& token_text) {
  Json j = header(id, "text_completion", created, model);
  Json c;
  c["index"] = index;
  c["text"] = to_valid_utf8(text);
  c["logprobs"] = logprobs ? completion_logprobs(*logprobs, token_text) : Json(nullptr);
  c["finish_reason"] = string_or_null(finish_reason);
  j["choices"] = Json::array({std::move(c)});
  return j;
}

Json chat_chunk(std::string_view id, int64_t created, std::string_view model, int32_t index,
                std::optional<std::string> role, std::optional<std::string> content, const LogprobsDelta* logprobs,
                std::optional<std::string> finish_reason, const TokenTextFn& token_text) {
  return chat_chunk(id, created, model, index, ChatDelta{.role = std::move(role), .content = std::move(content)},
                    logprobs, std::move(finish_reason), token_text);
}

Json chat_chunk(std::string_view id, int64_t created, std::string_view model, int32_t index, const ChatDelta& d,
                const LogprobsDelta* logprobs, std::optional<std::string> finish_reason, const TokenTextFn& token_text) {
  Json j = header(id, "chat.completion.chunk", created, model);
  Json delta = Json::object();
  if (d.role) delta["role"] = to_valid_utf8(*d.role);
  if (d.content) delta["content"] = to_valid_utf8(*d.content);
  if (d.reasoning) delta["reasoning_content"] = to_valid_utf8(*d.reasoning);
  if (!d.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCallDelta& call : d.tool_calls) {
      Json entry;
      entry["index"] = call.index;
      Json function;
      if (call.start) {
        entry["id"] = to_valid_utf8(call.id);
        entry["type"] = "function";
        function["name"] = to_valid_utf8(call.name);
      }
      function["arguments"] = to_valid_utf8(call.arguments);
      entry["function"] = std::move(function);
      calls.push_back(std::move(entry));
    }
    delta["tool_calls"] = std::move(calls);
  }
  Json c;
  c["index"] = index;
  c["delta"] = std::move(delta);
  c["logprobs"] = logprobs ? chat_logprobs(*logprobs, token_text) : Json(nullptr);
  c["finish_reason"] = string_or_null(finish_reason);
  j["choices"] = Json::array({std::move(c)});
  return j;
}

void add_abort_reason(Json& chunk, const std::string& reason) {
  if (!reason.empty()) chunk["choices"][0]["abort_reason"] = to_valid_utf8(reason);
}

Json usage_chunk(std::string_view id, int64_t created, std::string_view model, bool chat, const Usage& usage) {
  Json j = header(id, chat ? "chat.completion.chunk" : "text_completion", created, model);
  j["choices"] = Json::array();
  j["usage"] = usage_json(usage);
  return j;
}

std::string sse_data(const Json& payload) {
  return "data: " + payload.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

std::string sse_event(const Json& payload) {
  return "event: " + payload["type"].get<std::string>() + "\n" + sse_data(payload);
}

Json models_response(std::string_view model, int64_t created, int64_t max_model_len, int64_t vocab_size) {
  Json card;
  card["id"] = to_valid_utf8(model);
  card["object"] = "model";
  card["created"] = created;
  card["owned_by"] = "tachyon";
  card["root"] = to_valid_utf8(model);
  card["parent"] = nullptr;
  card["max_model_len"] = max_model_len;
  if (vocab_size > 0) card["vocab_size"] = vocab_size;
  Json j;
  j["object"] = "list";
  j["data"] = Json::array({std::move(card)});
  return j;
}

}  // namespace tachyon::server
