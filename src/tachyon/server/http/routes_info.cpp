// GET /v1/models, /health, /version, /metrics; POST /tokenize and /detokenize (vLLM's shapes).
#include <httplib.h>

#include "tachyon/server/http/http_server.h"
#include "tachyon/server/http/http_util.h"

namespace tachyon::server {
namespace {

constexpr const char* kVersion = "0.1.0";

nlohmann::json parse_object(const std::string& body) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(body);
  } catch (const nlohmann::json::exception& e) {
    throw ApiException(bad_request("", std::string("invalid JSON body: ") + e.what()));
  }
  if (!json.is_object()) throw ApiException(bad_request("", "the body must be a JSON object"));
  return json;
}

}  // namespace

void HttpServer::add_info_routes() {
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, models_response(context().limits().model_name, context().created(), context().limits().max_model_len).dump());
  });
  http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (context_.load() == nullptr) {
      send_error(res, {503, "loading: the model is not ready yet", "service_unavailable", "", ""});
    } else if (context().draining()) {
      send_error(res, {503, "draining: the server is shutting down", "service_unavailable", "", ""});
    } else {
      send_json(res, 200, R"({"status":"ok"})");
    }
  });
  http_->Get("/version", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, nlohmann::json{{"version", kVersion}}.dump());
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(context().metrics().render(context().engine().stats()), "text/plain; version=0.0.4; charset=utf-8");
  });
  http_->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json body = parse_object(req.body);
    std::vector<int32_t> tokens;
    if (body.contains("prompt")) {
      if (!body["prompt"].is_string()) throw ApiException(bad_request("prompt", "prompt must be a string"));
      bool add_special = body.value("add_special_tokens", true);
      tokens = context().tokenizer().encode(body["prompt"].get<std::string>(), add_special);
    } else if (body.contains("messages")) {
      // Reuse the chat parser for validation; it needs nothing else from the body.
      nlohmann::json chat = {{"messages", body["messages"]}};
      ChatRequest request = parse_chat_request(chat.dump(), context().limits());
      if (context().chat_template() == nullptr) throw ApiException(bad_request("messages", "this model has no chat template"));
      tokenizer::ChatTemplateInputs inputs;
      inputs.messages = request.messages;
      inputs.add_generation_prompt = body.value("add_generation_prompt", true);
      tokens = context().tokenizer().encode(context().chat_template()->render(inputs), false);
    } else {
      throw ApiException(bad_request("prompt", "give either prompt or messages"));
    }
    send_json(res, 200,
              nlohmann::json{{"count", tokens.size()}, {"max_model_len", context().limits().max_model_len}, {"tokens", tokens}}
                  .dump());
  });
  http_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json body = parse_object(req.body);
    if (!body.contains("tokens") || !body["tokens"].is_array()) {
      throw ApiException(bad_request("tokens", "tokens must be a list of token ids"));
    }
    std::vector<int32_t> ids;
    for (const auto& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= context().limits().vocab_size) {
        throw ApiException(bad_request("tokens", "every token must be an id in [0, vocab_size)"));
      }
      ids.push_back(t.get<int32_t>());
    }
    send_json(res, 200, nlohmann::json{{"prompt", to_valid_utf8(context().tokenizer().decode(ids))}}.dump());
  });
}

}  // namespace tachyon::server
