// OpenAI's Responses API (POST /v1/responses) over the chat route's machinery, as the Anthropic
// Messages API is (anthropic_messages.h): a request body is converted into the ChatRequest the
// chat route takes (templating, validation, sampling, structured outputs and the output parsers
// are the chat route's), and the chat answer's pieces (content, reasoning, tool calls;
// chat_output.h) are written back as Responses output items, whole or as its typed SSE events.
// Pure functions and one builder: no sockets, no engine.
//
// Mapping (docs/api.md, "POST /v1/responses"):
//  - instructions -> a leading system message; input as a string -> one user message; input
//    items: message (user, assistant, system, developer -> system; text parts only),
//    function_call -> the assistant turn's tool_calls, function_call_output -> a tool message,
//    reasoning -> the next assistant turn's reasoning_content. Other items: 400.
//  - max_output_tokens -> max_completion_tokens; temperature, top_p, stream, parallel_tool_calls,
//    user, safety_identifier as they are; tools [{type: function, name, description, parameters,
//    strict}] -> function tools (hosted tools: 400); tool_choice auto / none / required /
//    {type: function, name}; text.format (text, json_object, json_schema) -> response_format;
//    reasoning.effort -> enable_thinking (off for none / minimal); metadata is echoed.
//  - previous_response_id continues a kept response (server/responses_store.h): its items come
//    before the input, its instructions do not carry over. store false keeps nothing.
//  - include "message.output_text.logprobs" (or top_logprobs > 0, 0 to 20 alternatives) -> the chat
//    route's logprobs: each output_text part and delta carries the entries of its tokens, those
//    of the reasoning left out; refused beside tools (a call's tokens are no output text).
//  - Refused by name: conversation, prompt, background, truncation other than disabled, and
//    max_tool_calls. include's other values concern items never written here.
//  - Errors are OpenAI's error bodies, with this body's field names (max_output_tokens,
//    text.format, input).
//
// Tests: tests/server/test_server_responses.cpp (ctest -R ServerResponses) and
// tests/server/openai_responses_client.cjs with the official openai client.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tachyon/server/chat_output.h"
#include "tachyon/server/openai_protocol.h"

namespace tachyon::server {

struct ResponsesRequest {
  ChatRequest chat;
  // The conversation's items this response answers: those of the response it continues
  // (previous_response_id), then its own input (a string input as one user message item).
  nlohmann::ordered_json items = nlohmann::ordered_json::array();
  // The request's own input as GET /v1/responses/{id}/input_items lists it: each item with an id
  // (the one it was given, else a new one: msg_, fc_, fco_ or rs_ by its type), a message's text
  // content as one part (input_text; output_text for an assistant's).
  nlohmann::ordered_json input_items = nlohmann::ordered_json::array();
  bool store = true;  // `store`: keep the response (where the server keeps any)
  // The request's fields the response object repeats, those given: instructions,
  // max_output_tokens, temperature, top_p, user, reasoning, previous_response_id, metadata, tools,
  // tool_choice, text (with a format); always parallel_tool_calls; and store (set by the route:
  // whether kept). ResponseBuilder fills in the defaults of the others.
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
};

// The items a kept response ends (ResponsesStore::Entry::items), nullopt for an id not kept.
using PreviousItems = std::function<std::optional<nlohmann::ordered_json>(const std::string& id)>;

// Throws ApiException (400 naming the field; 404 for another model). `previous` finds the
// conversation previous_response_id names; null where the server keeps no responses (the field
// is then refused).
ResponsesRequest parse_responses_request(std::string_view body, const ServerLimits& limits,
                                         const PreviousItems& previous = nullptr);

// A 400 of the chat route's parsing or prompt building (the structured-output schema compiles
// there) with the chat body's field names rewritten as this body spells them
// ("response_format.json_schema.schema" -> "text.format.schema", "max_completion_tokens" ->
// "max_output_tokens", "messages" -> "input").
ApiException with_responses_fields(const ApiException& chat_error);

// "resp_" and 24 random letters and digits.
std::string make_response_id();

// GET /v1/responses/{id}/input_items' list object over a kept response's input items (in input
// order): order "asc" or "desc", the items after the one with id `after` ("" from the first), at
// most `limit`; {object: "list", data, first_id, last_id, has_more}. Throws ApiException (400)
// naming `after` when no item has that id.
nlohmann::ordered_json input_item_list(const nlohmann::ordered_json& items, bool ascending, const std::string& after,
                                       int64_t limit);

// One answer as a Responses response object, built from the chat output's pieces in order: a
// reasoning item, message items (one output_text part each) and function_call items. A streamed
// answer sends what start / add / finish return, a whole one sends response() at the end; so the
// streamed deltas concatenate to the whole answer. Events carry sequence_number from 0.
class ResponseBuilder {
 public:
  ResponseBuilder(std::string id, std::string model, int64_t created_at, nlohmann::ordered_json echo,
                  int64_t input_tokens);

  std::string start();  // SSE: response.created, response.in_progress
  // SSE: response.output_item.added / content_part.added / output_text.delta /
  // reasoning_text.delta / function_call_arguments.delta, and the .done events of an item closed.
  // `logprobs`: entries of output text tokens (null: none asked for); they go with the next
  // output_text delta (this one's when it has one) and into its part, or into the message's part
  // when it closes first.
  std::string add(const std::vector<ChatPiece>& pieces, const nlohmann::ordered_json* logprobs = nullptr);
  // The chat finish reason ("stop", "length", "tool_calls"): "length" ends the response as
  // incomplete (max_output_tokens). SSE: the last item's .done events, then response.completed or
  // response.incomplete.
  // cached_tokens: of the input tokens, those served from the prefix cache; reasoning_tokens: of
  // the output tokens, those of the answer's reasoning.
  std::string finish(const std::string& finish_reason, int64_t output_tokens, int64_t cached_tokens = 0,
                     int64_t reasoning_tokens = 0);
  nlohmann::ordered_json response() const;  // the whole response object
  const nlohmann::ordered_json& output() const { return output_; }  // the output items so far

 private:
  enum class Item { kNone, kMessage, kReasoning, kFunctionCall };
  std::string event(nlohmann::ordered_json payload);  // numbered SSE event
  std::string open(Item kind, const ChatPiece& piece);
  std::string close(const char* status = "completed");  // the open item's .done events

  std::string id_;
  std::string model_;
  int64_t created_at_ = 0;
  nlohmann::ordered_json echo_;
  int64_t input_tokens_ = 0;
  int64_t output_tokens_ = 0;
  int64_t cached_tokens_ = 0;
  int64_t reasoning_tokens_ = 0;
  std::string status_ = "in_progress";
  std::string incomplete_reason_;
  nlohmann::ordered_json output_ = nlohmann::ordered_json::array();  // closed items and the open one
  Item open_ = Item::kNone;
  int64_t sequence_ = 0;
  nlohmann::ordered_json pending_logprobs_ = nlohmann::ordered_json::array();  // not yet with a delta
};

}  // namespace tachyon::server
