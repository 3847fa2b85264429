// Native results -> OpenAI response JSON and SSE frames, shaped as the official clients and
// vLLM's OpenAI server expect. Key order is fixed (ordered_json); every string is made valid
// UTF-8 (ill-formed bytes, e.g. half a character in one token's text, become U+FFFD), so dump()
// never throws.
//
// Decisions:
//  - Logprob values are written as the shortest decimal that reads back as the same float
//    (-0.1f -> -0.1, not -0.10000000149011612); -inf is written as -9999.0 (as vLLM does).
//  - Completions' top_logprobs per position is {token_text: logprob} holding the top N and the
//    sampled token (N+1 entries when the sampled token is not in the top N; OpenAI documents this).
//    Equal texts of different ids keep the first (most likely) entry.
//  - text_offset counts Unicode code points (Python's len(), as vLLM); streaming callers pass the
//    offset of the chunk's first token (LogprobsDelta::text_offset).
//  - Token texts: the sampled token's text comes from the caller's parallel list; alternatives
//    come from token_text(id). Without a token_text function an alternative is "token_id:<id>"
//    (vLLM's return_tokens_as_token_ids spelling).
//  - Chat logprobs entries: {token, logprob, bytes, top_logprobs:[{token, logprob, bytes}]} with
//    top_logprobs the top N only (OpenAI). bytes are the UTF-8 bytes of the caller's token text.
//  - No usage on regular stream chunks; usage_chunk carries it (choices: []).
//  - finish_reason "" is written as null.
//  - A choice the engine ended by itself (finish_reason "abort": its structured-output constraint
//    could not be followed) also has "abort_reason", a sentence saying why, beside finish_reason
//    (streamed: on the choice's last chunk). A key of tachyon's own: OpenAI's clients keep keys
//    they do not know, and raise on an "error" only at the top level, so the answer still parses
//    (an "error" on the choice would read as a failed request, which the other choices are not).
//    vLLM's per-choice "stop_reason" names the stop string or token, so it is not reused. A
//    choice aborted by its client or by shutdown has none.
//  - Chat messages: "reasoning_content" only when there is reasoning, "tool_calls" only when
//    there are calls; content is null when the answer holds calls and no text (OpenAI's shape).
//    Streamed tool calls open with {index, id, type, function {name, arguments: ""}} and go on
//    with {index, function {arguments: fragment}} (OpenAI's shape).
//
// Tests: tests/unit/test_openai_protocol_responses.cpp (ctest -R openai).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tachyon/core/sampled_token.h"

namespace tachyon::server {

// Text of one token id, for top-logprob alternatives (the detokenizer's piece for that id).
using TokenTextFn = std::function<std::string(int32_t token)>;

// One tool call of a chat answer. arguments: the JSON text of the arguments object.
struct ToolCall {
  std::string id;  // "call_..."
  std::string name;
  std::string arguments;
};

struct CompletionChoiceResult {
  int32_t index = 0;
  std::string text;                      // the whole completion (with the prompt in front when echo)
  std::vector<int32_t> token_ids;        // [num_tokens] generated ids; not serialized (caller's bookkeeping)
  std::vector<std::string> token_texts;  // [num_tokens] text of each sampled token, parallel to logprobs
  std::optional<std::vector<core::SampledToken>> logprobs;  // [num_tokens]; nullopt: not requested -> null
  std::string finish_reason;  // "stop" | "length" | "abort"; chat also "tool_calls"
  std::string abort_reason;   // with "abort": why the engine ended it by itself ("" leaves it out)
  std::string reasoning;              // chat: reasoning_content ("" leaves it out)
  std::vector<ToolCall> tool_calls;   // chat: the calls, in answer order
};

// One streamed piece of a tool call: the opening one (start) carries id and name.
struct ToolCallDelta {
  int32_t index = 0;
  bool start = false;
  std::string id;         // start only
  std::string name;       // start only
  std::string arguments;  // a fragment ("" on the opening piece)
};

// What one chat chunk's delta holds; unset fields are left out.
struct ChatDelta {
  std::optional<std::string> role;
  std::optional<std::string> content;
  std::optional<std::string> reasoning;
  std::vector<ToolCallDelta> tool_calls;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // of prompt_tokens, served from the prefix cache (computed no more)
  // Of completion_tokens, those of the answers' reasoning (ChatOutput::reasoning_tokens); unset when
  // the request's answers are not parsed for reasoning (then the field is left out).
  std::optional<int64_t> reasoning_tokens;
};


// Logprobs of the tokens one stream chunk carries.
struct LogprobsDelta {
  std::vector<core::SampledToken> tokens;  // [num_tokens]
  std::vector<std::string> texts;            // [num_tokens] text of each sampled token
  int64_t text_offset = 0;                   // completions: code points of the choice's text before this chunk
};

// {"prompt_tokens","completion_tokens","total_tokens","prompt_tokens_details":{"cached_tokens"}}
nlohmann::ordered_json usage_json(const Usage& usage);

// Non-streamed. object "text_completion": choices [{index, text, logprobs, finish_reason}], usage.
nlohmann::ordered_json completion_response(std::string_view id, int64_t created, std::string_view model,
                                           const std::vector<CompletionChoiceResult>& choices, const Usage& usage,
                                           const TokenTextFn& token_text = {});
// Non-streamed. object "chat.completion": choices [{index, message {role, content}, logprobs, finish_reason}], usage.
nlohmann::ordered_json chat_response(std::string_view id, int64_t created, std::string_view model,
                                     const std::vector<CompletionChoiceResult>& choices, const Usage& usage,
                                     const TokenTextFn& token_text = {});

// One streamed delta of one choice. logprobs: nullptr when not requested -> "logprobs": null.
nlohmann::ordered_json completion_chunk(std::string_view id, int64_t created, std::string_view model, int32_t index,
                                        std::string_view text, const LogprobsDelta* logprobs,
                                        std::optional<std::string> finish_reason, const TokenTextFn& token_text = {});
// delta holds "role" (first chunk: "assistant") and "content" only when given; the last chunk of
// a choice has an empty delta {} and its finish_reason.
nlohmann::ordered_json chat_chunk(std::string_view id, int64_t created, std::string_view model, int32_t index,
                                  std::optional<std::string> role, std::optional<std::string> content,
                                  const LogprobsDelta* logprobs, std::optional<std::string> finish_reason,
                                  const TokenTextFn& token_text = {});
nlohmann::ordered_json chat_chunk(std::string_view id, int64_t created, std::string_view model, int32_t index,
                                  const ChatDelta& delta, const LogprobsDelta* logprobs,
                                  std::optional<std::string> finish_reason, const TokenTextFn& token_text = {});
// Adds "abort_reason" to the one choice of a chunk above when `reason` is not empty (the
// choice's last chunk, the one with finish_reason "abort").
void add_abort_reason(nlohmann::ordered_json& chunk, const std::string& reason);
// The final usage chunk of a stream with include_usage: choices [] and usage.
nlohmann::ordered_json usage_chunk(std::string_view id, int64_t created, std::string_view model, bool chat,
                                   const Usage& usage);

// The logprobs objects alone (also used by the builders above).
nlohmann::ordered_json completion_logprobs(const LogprobsDelta& logprobs, const TokenTextFn& token_text);
nlohmann::ordered_json chat_logprobs(const LogprobsDelta& logprobs, const TokenTextFn& token_text);

// "data: <compact json>\n\n"
std::string sse_data(const nlohmann::ordered_json& payload);
// "event: <payload's type>\ndata: <compact json>\n\n": the named events of the Anthropic Messages
// and Responses APIs.
std::string sse_event(const nlohmann::ordered_json& payload);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// GET /v1/models: {"object":"list","data":[{id, object "model", created, owned_by "tachyon", root,
// parent, max_model_len, vocab_size}]}. vocab_size (ServerLimits::vocab_size: prompt ids must lie
// in [0, vocab_size)) is a key of tachyon's own, which OpenAI and vLLM clients ignore; benchmark
// clients draw valid random prompts from it. <= 0 (unknown) leaves it out.
nlohmann::ordered_json models_response(std::string_view model, int64_t created, int64_t max_model_len,
                                       int64_t vocab_size);

}  // namespace tachyon::server
