// POST /v1/messages, the Anthropic Messages API. The body becomes the chat route's ChatRequest
// (parse_anthropic_request) and then its Generation (chat_generation: template, tokens, parsers),
// runs as a GenerationRun like every generation, and its chat output pieces are written as
// Anthropic blocks by AnthropicMessage, streamed or whole. As on the chat route, everything is
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
#include "tachyon/server/http/generation_run.h"
#include "tachyon/server/http/http_routes.h"
#include "tachyon/server/http/pd_roles.h"

namespace tachyon::server {
namespace {

class MessageAnswer : public BodyStream {
 public:
  // `imported`: the prompt's rows a decode server pulled (http/pd_roles.h), or null. `keepalive`:
  // a non-streamed answer whose head went first writes a space this often until its body.
  MessageAnswer(ServingContext& context, Generation g, ImportedRows imported,
                std::optional<std::chrono::milliseconds> keepalive)
      : g_(std::move(g)), keepalive_(keepalive),
        ticket_(context.client_quota().acquire(g_.client, g_.sequences())),  // may throw: before any byte
        run_(std::make_unique<GenerationRun>(context, g_.prompts, g_.params, g_.skip_special_tokens,
                                             std::move(imported))),  // ditto
        output_(g_.chat_output, make_tool_use_id), message_(g_.id, g_.model, run_->prompt_tokens()) {}

  void set_wakeup(std::function<void()> wakeup) override { run_->set_wakeup(std::move(wakeup)); }

  bool pump(std::string& out) override {
    if (!g_.stream) return step(out);
    try {
      return step(out);
    } catch (const std::exception& e) {
      ApiError error{500, std::string("internal error while streaming: ") + e.what(), "api_error", "", ""};
      out += "event: error\ndata: " + anthropic_error_body(error) + "\n\n";
      return true;
    }
  }

 private:
  bool step(std::string& out) {
    std::string events;
    if (!started_) {
      started_ = true;
      events += message_.start();
    }
    const std::optional<std::string> failure = run_->engine_failure();  // before poll(): it sees every finish
    std::vector<ChoiceEvent> polled = run_->poll();
    if (failure) {  // the engine failed under this request: an error is its answer
      ticket_.reset();
      status_ = 500;
      const std::string error = anthropic_error_body({*status_, *failure, "api_error", "", ""});
      out += g_.stream ? "event: error\ndata: " + error + "\n\n" : error;
      return true;
    }
    for (ChoiceEvent& e : polled) {
      std::vector<ChatPiece> pieces = output_.push(e.text, e.token_ids);
      if (e.finish_reason) {
        std::vector<ChatPiece> last = output_.finish();
        pieces.insert(pieces.end(), std::make_move_iterator(last.begin()), std::make_move_iterator(last.end()));
        stop_reason_ = anthropic_stop_reason(output_.finish_reason(*e.finish_reason), e.stop_string);
        stop_string_ = e.stop_string;
        abort_reason_ = e.abort_reason;
      }
      events += message_.add(pieces);
    }
    if (run_->finished() && !abort_reason_.empty()) {
      // The engine gave up on the answer (its forced tool call's schema could not be followed):
      // Anthropic has no stop_reason for that, and a cut tool_use input is no answer, so it is an
      // error naming why; the SDK raises it, streamed (an error event) or not.
      ticket_.reset();
      status_ = 400;
      const std::string error = anthropic_error_body({*status_, abort_reason_, "invalid_request_error", "", ""});
      out += g_.stream ? events + "event: error\ndata: " + error + "\n\n" : error;
      return true;
    }
    if (run_->finished()) {
      ticket_.reset();  // the share comes back before the client can see the end
      events += message_.finish(stop_reason_, stop_string_, run_->completion_tokens());
    }
    if (g_.stream) {
      out += events;
    } else if (run_->finished()) {
      out = message_.message().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    } else if (const auto now = std::chrono::steady_clock::now(); keepalive_ && now - last_write_ >= *keepalive_) {
      last_write_ = now;
      out = " ";  // JSON ignores leading whitespace
    }
    return run_->finished();
  }
  std::optional<int> status() const override { return status_; }

  const Generation g_;
  const std::optional<std::chrono::milliseconds> keepalive_;  // unset: the head waits for the body
  std::chrono::steady_clock::time_point last_write_ = std::chrono::steady_clock::now();
  std::optional<int> status_;  // set when the answer is an error
  std::unique_ptr<ClientQuota::Ticket> ticket_;  // released when the run ends, or after it is gone
  std::unique_ptr<GenerationRun> run_;
  ChatOutput output_;
  AnthropicMessage message_;
  bool started_ = false;
  std::string stop_reason_ = "end_turn";
  std::string stop_string_;
  std::string abort_reason_;  // set when the engine ended the answer by itself
};

void answer_message(ServingContext& context, Generation g, ImportedRows imported,
                    std::chrono::milliseconds keepalive, HttpResponse& res) {
  std::optional<std::chrono::milliseconds> head_first_keepalive;
  if (g.stream) {
    res.content_type = "text/event-stream";
    res.headers.emplace_back("Cache-Control", "no-cache");
  } else {
    res.content_type = "application/json";
    // Its status is known with its body (200, 400, or 500 from a failed engine), except on a
    // decode server: see answer_generation (routes_generation.cpp).
    const bool head_first = context.role() == "decode";
    res.head_waits_for_body = !head_first;
    if (head_first) head_first_keepalive = keepalive;
  }
  res.stream = std::make_shared<MessageAnswer>(context, std::move(g), std::move(imported), head_first_keepalive);
}

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
        answer_message(context, std::move(g), std::move(imported), keepalive, res);
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
