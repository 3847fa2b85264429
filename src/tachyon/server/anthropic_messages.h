// The Anthropic Messages protocol (POST /v1/messages) over the chat route's machinery: a request
// body is converted into the ChatRequest the OpenAI chat route takes (so templating, validation,
// sampling and the output parsers are the chat route's, not a copy), and the chat answer's
// pieces (content, reasoning, tool calls; chat_output.h) are turned back into Anthropic's
// message JSON and SSE events. Pure functions and one builder: no sockets, no engine.
//
// Mapping (docs/api.md, "POST /v1/messages"):
//  - system (a string or text blocks) -> a leading system message; text blocks joined with "\n".
//  - user text blocks -> the user message's content; tool_result blocks -> tool messages (before
//    the user's text); assistant tool_use blocks -> tool_calls, thinking blocks ->
//    reasoning_content. image, document and any other block type: 400.
//  - A final assistant message is a prefill: the prompt ends with its text after the generation
//    prompt, and the answer continues it (holding only the continuation). Only text blocks, and
//    neither thinking enabled nor a forced tool_choice with it (400s, as Anthropic's).
//  - max_tokens is required; stop_sequences -> stop; temperature, top_p, top_k, stream as is;
//    metadata.user_id -> user (at most fields::kMaxUserBytes); other metadata keys are ignored.
//  - tools [{name, description, input_schema}] -> function tools; tool_choice auto / none as the
//    chat route's, any -> "required" and tool -> the named function (a forced call, decoded under
//    the tool-call grammar); disable_parallel_tool_use -> parallel_tool_calls false. Server tools
//    (a "type" other than "custom") are refused.
//  - thinking {type: enabled | disabled} -> chat_template_kwargs.enable_thinking true | false
//    (templates that do not read it ignore it); budget_tokens is checked, not enforced.
//  - Errors: {"type":"error","error":{"type","message"}}, the type chosen from the HTTP status;
//    a 400 names the field as the client sent it ("messages.1.content.0.text", "stop_sequences").
//
// Tests: tests/server/test_server_messages.cpp (ctest -R server.*Messages) and
// tests/server/anthropic_client.cjs with the official SDK (ctest -R anthropic_npm_client).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tachyon/server/openai_errors.h"
#include "tachyon/server/openai_protocol.h"
#include "tachyon/server/tool_parser.h"

namespace tachyon::server {

// Throws ApiException (400 naming the field; 404 for another model).
// A /v1/messages request as the chat route takes it: a final assistant message becomes the
// ChatRequest's prefill, which the answer continues. /v1/messages/count_tokens takes the same
// body without max_tokens (any given is ignored).
enum class AnthropicRoute { kMessages, kCountTokens };
ChatRequest parse_anthropic_request(std::string_view body, const ServerLimits& limits,
                                    AnthropicRoute route = AnthropicRoute::kMessages);

// "invalid_request_error" (400, 405, 431 ...), "authentication_error" (401), "permission_error"
// (403), "not_found_error" (404), "request_too_large" (413), "rate_limit_error" (429),
// "overloaded_error" (503, 529), "api_error" (500 and anything else >= 500).
std::string anthropic_error_type(int status);
// {"type":"error","error":{"type","message"}}, valid UTF-8.
std::string anthropic_error_body(const ApiError& error);

// The chat route's finish reason ("stop", "length", "tool_calls", "abort") and the stop string
// that ended the answer ("" for none) -> "end_turn" | "max_tokens" | "stop_sequence" | "tool_use".
std::string anthropic_stop_reason(const std::string& finish_reason, const std::string& stop_string);

// "msg_" / "toolu_" and 24 random letters and digits.
std::string make_message_id();
std::string make_tool_use_id();

// One answer as Anthropic content blocks, built from the chat output's pieces in order. The same
// builder serves both shapes: a streamed answer sends what start / add / finish return, a whole
// one sends message() at the end; so the streamed deltas concatenate to the whole answer.
class AnthropicMessage {
 public:
  AnthropicMessage(std::string id, std::string model, int64_t input_tokens);

  std::string start();                                // SSE: message_start, ping
  std::string add(const std::vector<ChatPiece>& pieces);  // SSE: content_block_start / _delta / _stop
  // SSE: the last content_block_stop, message_delta, message_stop. cached_input_tokens: of the
  // input tokens, those served from the prefix cache. As Anthropic counts them, the final usage's
  // input_tokens leaves those out and cache_read_input_tokens holds them; message_start, sent
  // before the engine looked up the cache, counts every input token, and message_delta's usage
  // (which clients take over message_start's) has the final counts.
  std::string finish(const std::string& stop_reason, const std::string& stop_string, int64_t output_tokens,
                     int64_t cached_input_tokens = 0);
  nlohmann::ordered_json message() const;  // the whole message (after finish)

 private:
  enum class Block { kNone, kText, kThinking, kToolUse };
  nlohmann::ordered_json final_usage() const;
  std::string open(Block kind, const ChatPiece& piece);
  std::string close();

  std::string id_;
  std::string model_;
  int64_t input_tokens_ = 0;
  int64_t output_tokens_ = 0;
  int64_t cached_input_tokens_ = 0;
  std::string stop_reason_;
  std::string stop_string_;
  nlohmann::ordered_json content_ = nlohmann::ordered_json::array();  // closed and open blocks
  Block open_ = Block::kNone;
  std::string tool_arguments_;  // the open tool_use block's input, as JSON text so far
};

}  // namespace tachyon::server
