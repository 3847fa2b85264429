// POST /v1/responses, OpenAI's Responses API. The body becomes the chat route's ChatRequest
// (parse_responses_request) and then its Generation (chat_generation: template, tokens, parsers),
// and its chat output pieces are written as Responses output items by ResponseBuilder, streamed
// (typed SSE events) or whole, through the answer the Anthropic route shares
// (http/shaped_answer.h). Roles as on the chat route: a prefill server queues the prompt and
// answers with its lease, a decode server pulls the rows the router's header names. Errors are
// OpenAI's error bodies; a streamed answer's failure after the head is an "error" event.
#include <chrono>

#include "tachyon/server/http/http_routes.h"
#include "tachyon/server/http/pd_roles.h"
#include "tachyon/server/http/shaped_answer.h"
#include "tachyon/server/responses_api.h"

namespace tachyon::server {
namespace {

class ResponsesShape : public AnswerShape {
 public:
  ResponsesShape(std::string id, std::string model, int64_t created_at, nlohmann::ordered_json echo)
      : id_(std::move(id)), model_(std::move(model)), created_at_(created_at), echo_(std::move(echo)) {}
  std::string start(int64_t input_tokens) override {
    builder_.emplace(id_, model_, created_at_, echo_, input_tokens);
    return builder_->start();
  }
  std::string add(const std::vector<ChatPiece>& pieces) override { return builder_->add(pieces); }
  std::string finish(const std::string& finish_reason, const std::string&, int64_t output_tokens) override {
    return builder_->finish(finish_reason, output_tokens);
  }
  std::string whole() const override {
    return builder_->response().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
  std::string error_body(const ApiError& error) const override { return server::error_body(error); }
  std::string error_event(const ApiError& error) override {
    nlohmann::ordered_json event = {{"type", "error"},
                                    {"code", error.code.empty() ? error.type : error.code},
                                    {"message", to_valid_utf8(error.message)},
                                    {"param", nullptr}};
    return "event: error\ndata: " + event.dump() + "\n\n";
  }
  std::string tool_call_id() const override { return make_tool_call_id(); }

 private:
  const std::string id_, model_;
  const int64_t created_at_;
  const nlohmann::ordered_json echo_;
  std::optional<ResponseBuilder> builder_;  // from start(), which knows the prompt's length
};

void handle_responses(ServingContext& context, const HttpRequest& req, const Respond& respond,
                      std::chrono::milliseconds keepalive) {
  context.refuse_if_unavailable();
  ResponsesRequest request = parse_responses_request(req.body, context.limits());
  Generation g;
  try {
    g = chat_generation(context, request.chat);
  } catch (const ApiException& e) {
    throw with_responses_fields(e);
  }
  g.id = make_response_id();
  g.model = context.limits().model_name;
  g.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  g.client = client_address(context, req);  // a router's client behind a router
  g.params.client = fair_share_client(g.client, g.user);
  answer_for_role(
      context, req, std::move(g), respond,
      [keepalive, echo = std::move(request.echo)](ServingContext& context, Generation g, ImportedRows imported,
                                                  HttpResponse& res) {
        auto shape = std::make_unique<ResponsesShape>(g.id, g.model, g.created, echo);
        answer_in_shape(context, std::move(g), std::move(imported), keepalive, std::move(shape), res);
      },
      error_body);
}

}  // namespace

void add_responses_routes(Router& router, ContextAccess context, std::chrono::milliseconds keepalive_interval) {
  // Async only for a request that names a KV source (a decode role's pull answers later).
  router.add_async(
      "POST", "/v1/responses",
      [context, keepalive_interval](const HttpRequest& req, const Respond& respond) {
        handle_responses(context(), req, respond, keepalive_interval);
      },
      names_kv_source);
}

}  // namespace tachyon::server
