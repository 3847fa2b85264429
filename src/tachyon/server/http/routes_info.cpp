// GET /v1/models, /v1/models/{id}, /health, /version, /metrics; POST /tokenize and /detokenize
// (vLLM's shapes).
#include <cctype>

#include "tachyon/server/http/http_routes.h"
#include "tachyon/server/http/http_util.h"
#include "tachyon/server/openai_request_fields.h"

namespace tachyon::server {
namespace {

constexpr const char* kVersion = "0.1.0";

void tokenize(ServingContext& context, const HttpRequest& req, HttpResponse& res) {
  fields::Json body = fields::parse_body(req.body, context.limits());
  std::vector<int32_t> tokens;
  if (body.contains("prompt")) {
    if (!body["prompt"].is_string()) throw ApiException(bad_request("prompt", "prompt must be a string"));
    const fields::Json* add_special = fields::find(body, "add_special_tokens");
    if (add_special != nullptr && !add_special->is_boolean()) {
      throw ApiException(bad_request("add_special_tokens", "add_special_tokens must be a boolean"));
    }
    tokens = context.tokenizer().encode(body["prompt"].get<std::string>(), add_special == nullptr || add_special->get<bool>());
  } else if (body.contains("messages")) {
    // Reuse the chat parser for validation, with what the chat route renders besides the
    // messages (the tools offered and the template's kwargs), so the count is its prompt's.
    fields::Json chat = {{"messages", body["messages"]}};
    for (const char* key : {"tools", "chat_template_kwargs"}) {
      if (body.contains(key)) chat[key] = body[key];
    }
    ChatRequest request = parse_chat_request(chat.dump(), context.limits());
    if (context.chat_template() == nullptr) throw ApiException(bad_request("messages", "this model has no chat template"));
    const fields::Json* generation_prompt = fields::find(body, "add_generation_prompt");
    if (generation_prompt != nullptr && !generation_prompt->is_boolean()) {
      throw ApiException(bad_request("add_generation_prompt", "add_generation_prompt must be a boolean"));
    }
    tokenizer::ChatTemplateInputs inputs;
    inputs.messages = request.messages;
    inputs.tools = request.tools;
    inputs.extra = request.chat_template_kwargs;
    inputs.add_generation_prompt = generation_prompt == nullptr || generation_prompt->get<bool>();
    std::string rendered;
    try {
      rendered = context.chat_template()->render(inputs);
    } catch (const Error& e) {
      throw ApiException(bad_request("messages", std::string("the chat template refused these messages: ") + e.what()));
    }
    tokens = context.tokenizer().encode(rendered, false);
  } else {
    throw ApiException(bad_request("prompt", "give either prompt or messages"));
  }
  send_json(res, 200,
            nlohmann::json{{"count", tokens.size()}, {"max_model_len", context.limits().max_model_len}, {"tokens", tokens}}
                .dump());
}

void detokenize(ServingContext& context, const HttpRequest& req, HttpResponse& res) {
  fields::Json body = fields::parse_body(req.body, context.limits());
  if (!body.contains("tokens") || !body["tokens"].is_array()) {
    throw ApiException(bad_request("tokens", "tokens must be a list of token ids"));
  }
  std::vector<int32_t> ids;
  for (const auto& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= context.limits().vocab_size) {
      throw ApiException(bad_request("tokens", "every token must be an id in [0, vocab_size)"));
    }
    ids.push_back(t.get<int32_t>());
  }
  send_json(res, 200, nlohmann::json{{"prompt", to_valid_utf8(context.tokenizer().decode(ids))}}.dump());
}

}  // namespace

void add_info_routes(Router& router, ContextAccess context, std::function<bool()> loaded) {
  router.add("GET", "/v1/models", [context](const HttpRequest&, HttpResponse& res) {
    const ServingContext& c = context();
    send_json(res, 200, models_response(c.limits().model_name, c.created(), c.limits().max_model_len, c.limits().vocab_size).dump());
  });
  router.add("GET", "/v1/models/", [context](const HttpRequest& req, HttpResponse& res) {
    const ServingContext& c = context();
    const std::string id = percent_decoded(std::string_view(req.path).substr(std::string_view("/v1/models/").size()));
    if (id != c.limits().model_name) throw ApiException(model_not_found(id, c.limits().model_name));
    send_json(res, 200, models_response(c.limits().model_name, c.created(), c.limits().max_model_len, c.limits().vocab_size)["data"][0].dump());
  }, /*prefix=*/true);
  // /health and /metrics answer from memory (atomics and the engine's published snapshot) on the
  // I/O thread that read them: a decode server's workers may all be waiting on KV pulls, and a
  // probe or a scrape must not queue behind them (tests/server/pd_serve_busy.py).
  router.add_inline("GET", "/health", [context, loaded](const HttpRequest&, HttpResponse& res) {
    if (!loaded()) {
      send_error(res, {503, "loading: the model is not ready yet", "service_unavailable", "", ""});
    } else if (std::optional<std::string> failure = context().engine().failure()) {
      send_error(res, {503, *failure, "service_unavailable", "", "engine_failed"});
    } else if (context().draining()) {
      send_error(res, {503, "draining: the server is shutting down", "service_unavailable", "", ""});
    } else {
      send_json(res, 200, R"({"status":"ok"})");
    }
  });
  router.add("GET", "/version", [](const HttpRequest&, HttpResponse& res) {
    send_json(res, 200, nlohmann::json{{"version", kVersion}}.dump());
  });
  router.add_inline("GET", "/metrics", [context](const HttpRequest&, HttpResponse& res) {
    ServingContext& c = context();
    res.content_type = "text/plain; version=0.0.4; charset=utf-8";
    res.body = c.metrics().render(c.engine().stats());
  });
  router.add("POST", "/tokenize", [context](const HttpRequest& req, HttpResponse& res) { tokenize(context(), req, res); });
  router.add("POST", "/detokenize",
             [context](const HttpRequest& req, HttpResponse& res) { detokenize(context(), req, res); });
}

}  // namespace tachyon::server
