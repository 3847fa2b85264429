// POST /v1/messages, the Anthropic Messages API. The body becomes the chat route's ChatRequest
// (parse_anthropic_request) and then its Generation (chat_generation: template, tokens, parsers),
// runs as a GenerationRun like every generation (http/shaped_answer.h), and its chat output pieces
// are written as Anthropic blocks by AnthropicMessage, streamed or whole. As on the chat route, everything is
// validated before the first byte; the engine never waits on the client (a slow reader's tokens
// coalesce in its run, and the connection pumps this body when there is news); a non-streamed
// answer's head waits for its body (a failed engine's answer is a 500 with Anthropic's api_error,
// one the engine ended by itself a 400 saying why), but on a decode server, as on the chat route,
// it goes first and keep-alive spaces follow (the router's client can then hang up on it; the
// router reads the status from the body); a streamed one's failure after the head is an `error`
// event. A final assistant message (a prefill) is continued: its tokens end the prompt.
// Errors are Anthropic-shaped on this route (Router::add's error body).
#include "tachyon/server/anthropic_messages.h"
#include "tachyon/server/http/generation.h"
#include "tachyon/server/http/http_routes.h"
#include "tachyon/server/http/pd_roles.h"
#include "tachyon/server/http/shaped_answer.h"

namespace tachyon::server {
namespace {

// The Anthropic message's blocks and events (AnthropicMessage) as the shared answer's shape.
class AnthropicShape : public AnswerShape {
 public:
  AnthropicShape(std::string id, std::string model) : id_(std::move(id)), model_(std::move(model)) {}
  std::string start(int64_t input_tokens) override {
    message_.emplace(id_, model_, input_tokens);
    return message_->start();
  }
  // The Messages API has no logprobs (the request cannot ask for them).
  std::string add(const std::vector<ChatPiece>& pieces, const nlohmann::ordered_json*) override {
    return message_->add(pieces);
  }
  std::string finish(const std::string& finish_reason, const std::string& stop_string, const Usage& usage) override {
    return message_->finish(anthropic_stop_reason(finish_reason, stop_string), stop_string, usage.completion_tokens,
                            usage.cached_tokens);
  }
  std::string whole() const override {
    return message_->message().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  std::string error_body(const ApiError& error) const override { return anthropic_error_body(error); }
  std::string error_event(const ApiError& error) override {
    return "event: error\ndata: " + anthropic_error_body(error) + "\n\n";
  }
  std::string tool_call_id() const override { return make_tool_use_id(); }

 private:
  const std::string id_, model_;
  std::optional<AnthropicMessage> message_;  // from start(), which knows the prompt's length
};

// As the chat route (routes_generation.cpp), roles included: a prefill server queues the prompt
// and answers with its lease, a decode server pulls the rows the router's header names.
void handle_messages(ServingContext& context, const HttpRequest& req, const Respond& respond,
                     std::chrono::milliseconds keepalive) {
  context.refuse_if_unavailable();
  Generation g = chat_generation(context, parse_anthropic_request(req.body, context.limits()));
  g.id = make_message_id();
  g.model = context.limits().model_name;
  g.client = client_address(context, req);  // a router's client behind a router
  g.params.client = fair_share_client(g.client, g.user);
  answer_for_role(
      context, req, std::move(g), respond,
      [keepalive](ServingContext& context, Generation g, ImportedRows imported, HttpResponse& res) {
        auto shape = std::make_unique<AnthropicShape>(g.id, g.model);
        answer_in_shape(context, std::move(g), std::move(imported), keepalive, std::move(shape), res);
      },
      anthropic_error_body);
}

// Anthropic's token count: the prompt /v1/messages would run for the same body (template, tools,
// prefill), {"input_tokens": N}, as that answer's usage.input_tokens; nothing is generated.
void count_tokens(ServingContext& context, const HttpRequest& req, HttpResponse& res) {
  const Generation g =
      chat_generation(context, parse_anthropic_request(req.body, context.limits(), AnthropicRoute::kCountTokens));
  res.body = nlohmann::json({{"input_tokens", g.prompts.at(0).size()}}).dump();
}

}  // namespace

void add_messages_routes(Router& router, ContextAccess context, std::chrono::milliseconds keepalive_interval) {
  // Async only for a request that names a KV source (a decode role's pull answers later).
  router.add_async(
      "POST", "/v1/messages",
      [context, keepalive_interval](const HttpRequest& req, const Respond& respond) {
        handle_messages(context(), req, respond, keepalive_interval);
      },
      names_kv_source, anthropic_error_body);
  router.add(
      "POST", "/v1/messages/count_tokens",
      [context](const HttpRequest& req, HttpResponse& res) { count_tokens(context(), req, res); },
      /*prefix=*/false, anthropic_error_body);
}

}  // namespace tachyon::server
