// POST /v1/responses, OpenAI's Responses API. The body becomes the chat route's ChatRequest
// (parse_responses_request) and then its Generation (chat_generation: template, tokens, parsers),
// and its chat output pieces are written as Responses output items by ResponseBuilder, streamed
// (typed SSE events) or whole, through the answer the Anthropic route shares
// (http/shaped_answer.h). Roles as on the chat route: a prefill server queues the prompt and
// answers with its lease, a decode server pulls the rows the router's header names. Errors are
// OpenAI's error bodies; a streamed answer's failure after the head is an "error" event. A server
// without a role keeps finished responses (server/responses_store.h) for previous_response_id,
// GET / DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items.
#include <algorithm>
#include <chrono>
#include <map>

#include "tachyon/server/http/http_routes.h"
#include "tachyon/server/http/http_util.h"
#include "tachyon/server/http/pd_roles.h"
#include "tachyon/server/http/shaped_answer.h"
#include "tachyon/server/openai_responses.h"
#include "tachyon/server/responses_api.h"
#include "tachyon/server/responses_store.h"

namespace tachyon::server {
namespace {

using Json = nlohmann::ordered_json;

class ResponsesShape : public AnswerShape {
 public:
  // `store`: where the finished response and its conversation's items are kept; null: not kept.
  ResponsesShape(std::string id, std::string model, int64_t created_at, Json echo, ResponsesStore* store, Json items,
                 Json input_items)
      : id_(std::move(id)), model_(std::move(model)), created_at_(created_at), echo_(std::move(echo)), store_(store),
        items_(std::move(items)), input_items_(std::move(input_items)) {
    echo_["store"] = store_ != nullptr;
  }
  std::string start(int64_t input_tokens) override {
    builder_.emplace(id_, model_, created_at_, echo_, input_tokens);
    return builder_->start();
  }
  std::string add(const std::vector<ChatPiece>& pieces, const Json* logprobs) override {
    return builder_->add(pieces, logprobs);
  }
  std::string finish(const std::string& finish_reason, const std::string&, const Usage& usage) override {
    std::string events = builder_->finish(finish_reason, usage.completion_tokens, usage.cached_tokens,
                                          usage.reasoning_tokens.value_or(0));
    whole_ = builder_->response().dump(-1, ' ', false, Json::error_handler_t::replace);
    if (store_ != nullptr) {  // kept before the client can see the end, so a next request finds it
      for (const Json& item : builder_->output()) items_.push_back(item);
      store_->put(id_, {whole_, items_.dump(-1, ' ', false, Json::error_handler_t::replace),
                        input_items_.dump(-1, ' ', false, Json::error_handler_t::replace)});
    }
    return events;
  }
  std::string whole() const override { return whole_; }
  std::string error_body(const ApiError& error) const override { return server::error_body(error); }
  std::string error_event(const ApiError& error) override {
    return sse_event({{"type", "error"},
                      {"code", error.code.empty() ? error.type : error.code},
                      {"message", to_valid_utf8(error.message)},
                      {"param", nullptr}});
  }
  std::string tool_call_id() const override { return make_tool_call_id(); }

 private:
  const std::string id_, model_;
  const int64_t created_at_;
  Json echo_;
  ResponsesStore* const store_;
  Json items_;  // the conversation this response answers; its output joins it when kept
  const Json input_items_;  // the request's own input items (ResponsesRequest::input_items)
  std::optional<ResponseBuilder> builder_;  // from start(), which knows the prompt's length
  std::string whole_;                       // the response object's text, from finish()
};

void handle_responses(ServingContext& context, const HttpRequest& req, const Respond& respond,
                      std::chrono::milliseconds keepalive) {
  context.refuse_if_unavailable();
  ResponsesStore* store = context.responses_store();
  PreviousItems previous;
  if (store != nullptr) {
    previous = [store](const std::string& id) -> std::optional<Json> {
      std::optional<ResponsesStore::Entry> entry = store->get(id);
      if (!entry) return std::nullopt;
      return Json::parse(entry->items);
    };
  }
  ResponsesRequest request = parse_responses_request(req.body, context.limits(), previous);
  if (!request.store) store = nullptr;
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
      [keepalive, store, echo = std::move(request.echo), items = std::move(request.items),
       input_items = std::move(request.input_items)](ServingContext& context, Generation g, ImportedRows imported,
                                                     HttpResponse& res) {
        auto shape = std::make_unique<ResponsesShape>(g.id, g.model, g.created, echo, store, items, input_items);
        answer_in_shape(context, std::move(g), std::move(imported), keepalive, std::move(shape), res);
      },
      error_body);
}

// GET /v1/responses/{id}/input_items: a kept response's input items, a page at a time (limit 1 to
// 100, default 20; order asc or desc, default desc; after an item id). `include` is taken and
// changes nothing: its values concern items this server never writes.
std::string input_items_page(const ResponsesStore::Entry& entry, const std::string& query) {
  const std::map<std::string, std::string> params = query_parameters(query);
  int64_t limit = 20;
  if (const auto it = params.find("limit"); it != params.end()) {
    const std::string& text = it->second;
    const bool digits = !text.empty() && text.size() <= 3 && std::all_of(text.begin(), text.end(), ::isdigit);
    limit = digits ? std::stoll(text) : 0;
    if (limit < 1 || limit > 100) {
      throw ApiException({400, "'limit' must be a whole number from 1 to 100, got '" + text + "'.",
                          "invalid_request_error", "limit", ""});
    }
  }
  bool ascending = false;
  if (const auto it = params.find("order"); it != params.end()) {
    if (it->second != "asc" && it->second != "desc") {
      throw ApiException({400, "'order' must be 'asc' or 'desc', got '" + it->second + "'.", "invalid_request_error",
                          "order", ""});
    }
    ascending = it->second == "asc";
  }
  const auto after = params.find("after");
  const Json items = Json::parse(entry.input_items);
  return input_item_list(items, ascending, after == params.end() ? "" : after->second, limit).dump();
}

// GET /v1/responses/{id}: a kept response; DELETE: forgets it; GET /v1/responses/{id}/input_items:
// its input items. 404 for an id not kept.
void kept_response(ServingContext& context, const HttpRequest& req, HttpResponse& res) {
  std::string id = req.path.substr(std::string_view("/v1/responses/").size());
  constexpr std::string_view kInputItems = "/input_items";
  const bool input_items = req.method == "GET" && std::string_view(id).ends_with(kInputItems);
  if (input_items) id.resize(id.size() - kInputItems.size());
  ResponsesStore* store = context.responses_store();
  const auto not_found = [&] {
    throw ApiException({404, "No response with id '" + id + "' is kept (never kept, deleted, or dropped as the least "
                             "recently used).", "invalid_request_error", "", "not_found"});
  };
  if (store == nullptr || id.empty() || id.find('/') != std::string::npos) not_found();
  if (req.method == "DELETE") {
    if (!store->remove(id)) not_found();
    res.body = Json{{"id", id}, {"object", "response"}, {"deleted", true}}.dump();
    return;
  }
  std::optional<ResponsesStore::Entry> entry = store->get(id);
  if (!entry) not_found();
  res.body = input_items ? input_items_page(*entry, req.query) : std::move(entry->response);
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
  for (const char* method : {"GET", "DELETE"}) {
    router.add(
        method, "/v1/responses/",
        [context](const HttpRequest& req, HttpResponse& res) { kept_response(context(), req, res); },
        /*prefix=*/true);
  }
}

}  // namespace tachyon::server
