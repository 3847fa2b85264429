// A chat answer written in another API's shape (the Anthropic Messages API, OpenAI's Responses
// API): the run, the quota ticket, the chat output parsers, the engine's failures and give-ups,
// streaming and the keep-alive of a head sent first are one body stream here; the shape only
// turns the chat output's pieces into its JSON and events (AnthropicMessage, ResponseBuilder).
// As on the chat route, the engine never waits on the client (a slow reader's tokens coalesce in
// its run) and a streamed answer's failure after the head is an error event.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tachyon/server/chat_output.h"
#include "tachyon/server/http/generation.h"
#include "tachyon/server/http/pd_roles.h"
#include "tachyon/server/openai_errors.h"
#include "tachyon/server/openai_responses.h"

namespace tachyon::server {

class AnswerShape {
 public:
  virtual ~AnswerShape() = default;
  virtual std::string start(int64_t input_tokens) = 0;                // the stream's first events
  // Events for these pieces. `logprobs`: when the request asked for them, the entries ({token,
  // logprob, bytes, top_logprobs}) of the output text's tokens released with these pieces (their
  // text may have come earlier or come later); null otherwise.
  virtual std::string add(const std::vector<ChatPiece>& pieces, const nlohmann::ordered_json* logprobs) = 0;
  // The answer's end: the chat route's finish reason ("stop", "length", "tool_calls"), the stop
  // string that ended it ("" for none) and the run's token counts. Returns the last events.
  virtual std::string finish(const std::string& finish_reason, const std::string& stop_string, const Usage& usage) = 0;
  virtual std::string whole() const = 0;  // the non-streamed body, after finish
  virtual std::string error_body(const ApiError& error) const = 0;
  virtual std::string error_event(const ApiError& error) = 0;  // SSE
  virtual std::string tool_call_id() const = 0;  // a new id for a tool call in this API's form
};

// Sets res to stream g's answer in `shape`. `keepalive`: on a decode server the head of a
// non-streamed answer goes first (its status then known from the body, as on the chat route)
// and a space follows this often until the body.
void answer_in_shape(ServingContext& context, Generation g, ImportedRows imported, std::chrono::milliseconds keepalive,
                     std::unique_ptr<AnswerShape> shape, HttpResponse& res);

}  // namespace tachyon::server
