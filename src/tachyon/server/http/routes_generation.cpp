// POST /v1/completions and /v1/chat/completions. Everything is validated and tokenized before
// anything is submitted or the first byte is sent; a failure after that point (a stream cut)
// sends an error frame and still ends with [DONE], except a failed engine's, whose error frame
// ends the stream (docs/api.md, "Lifecycle"). A non-streamed answer's head waits for its body,
// so a failed engine's answer is a 500. The answer is a BodyStream the connection pumps
// whenever the engine has news for this request (no thread waits on it). A decode role's
// request that names a KV source is answered once its pull ends, from the pull's thread
// (http/pd_roles.h), so that no HTTP worker waits on a prefill server.
#include <algorithm>
#include <memory>

#include "tachyon/server/chat_constraint.h"
#include "tachyon/server/chat_prompt.h"
#include "tachyon/server/chat_output.h"
#include "tachyon/server/http/generation.h"
#include "tachyon/server/http/generation_run.h"
#include "tachyon/server/http/http_routes.h"
#include "tachyon/server/http/http_util.h"
#include "tachyon/server/http/pd_roles.h"
#include "tachyon/server/openai_request_fields.h"

namespace tachyon::server {
namespace {

// min_tokens against max_tokens as the request ends up with it: the context left after the prompt
// may lower max_tokens below a min_tokens that the parser, before tokenizing, let through.
void check_min_tokens(const core::SamplingParams& params) {
  if (params.min_tokens <= params.max_tokens) return;
  throw ApiException(bad_request("min_tokens", "'min_tokens' is " + std::to_string(params.min_tokens) +
                                                   ", more than the " + std::to_string(params.max_tokens) +
                                                   " tokens this request may generate (its max_tokens, or the "
                                                   "context left after its prompt)."));
}

Generation completion_generation(ServingContext& context, const std::string& body) {
  CompletionRequest request = parse_completion_request(body, context.limits());
  Generation g;
  g.params = request.params;
  g.stream = request.stream;
  g.include_usage = request.include_usage;
  g.user = request.user;
  if (!request.prompt_texts.empty()) {
    for (const std::string& text : request.prompt_texts) {
      g.prompts.push_back(context.tokenizer().encode(text, /*add_special_tokens=*/true));
      if (request.echo) g.echo_texts.push_back(text);
    }
  } else {
    g.prompts = request.prompt_ids;
    if (request.echo) {
      for (const auto& ids : g.prompts) g.echo_texts.push_back(context.tokenizer().decode(ids));
    }
  }
  for (const auto& prompt : g.prompts) {
    if (prompt.empty()) throw ApiException(bad_request("prompt", "the prompt tokenizes to no tokens"));
    g.params.max_tokens = std::min(g.params.max_tokens, resolve_max_tokens(static_cast<int64_t>(prompt.size()),
                                                                            request.max_tokens, context.limits()));
  }
  check_min_tokens(g.params);
  g.id = make_request_id("cmpl");
  return g;
}

}  // namespace

Generation chat_generation(ServingContext& context, const ChatRequest& request) {
  if (context.chat_template() == nullptr) {
    throw ApiException(bad_request("messages", "this model has no chat template; use /v1/completions"));
  }
  const ChatParsers& parsers = context.chat_parsers();
  const bool parse_tools = request.tool_choice != ToolChoice::kNone && request.tools.is_array() &&
                           !request.tools.empty() && !parsers.tool.empty();
  const ChatPrompt prompt = render_chat_prompt(*context.chat_template(), context.tokenizer(), request);
  const std::string& rendered = prompt.rendered;
  Generation g;
  g.chat = true;
  g.prompts.push_back(prompt.tokens);
  g.params = request.params;
  g.user = request.user;
  // The request's constraint or a forced call, after the reasoning where the model reasons.
  apply_chat_constraint(request, parsers, rendered, context.limits(), g.params);
  g.params.max_tokens =
      resolve_max_tokens(static_cast<int64_t>(g.prompts[0].size()), request.max_tokens, context.limits());
  check_min_tokens(g.params);
  g.stream = request.stream;
  g.include_usage = request.include_usage;
  g.id = make_request_id("chatcmpl");
  g.chat_output.tool_parser = parse_tools ? parsers.tool : "";
  g.chat_output.tools = request.tools;
  g.chat_output.reasoning_parser = parsers.reasoning;
  // The answer continues the prefill (continue_final_message), which may itself open the block.
  g.chat_output.reasoning_starts_inside = prompt_opens_reasoning(parsers.reasoning, rendered + request.prefill);
  g.chat_output.parallel_tool_calls = request.parallel_tool_calls;
  g.skip_special_tokens = !((parse_tools && parsers.tool_markers_special) ||
                            (!parsers.reasoning.empty() && parsers.reasoning_markers_special));
  g.chat_output.tokenizer = &context.tokenizer();  // reasoning markers by their ids, reasoning tokens
  g.chat_output.skip_special_tokens = g.skip_special_tokens;
  return g;
}

namespace {

// The answer to a request whose engine failed under it: the OpenAI error object, status 500 (as
// a step that threw is: the server failed while it served the request; OpenAI's clients retry a
// 500 as they do a 503, and /health's and new requests' 503 says the server is gone for now).
ApiError engine_failed(const std::string& failure) {
  return {500, failure, "internal_server_error", "", "engine_failed"};
}

// outputs: chat only, one per choice (completions: empty, the text is the answer).
void accumulate(const ServingContext& context, std::vector<ChoiceEvent>&& events, std::vector<CompletionChoiceResult>& choices,
                std::vector<std::unique_ptr<ChatOutput>>& outputs) {
  const TokenTextFn token_text = token_text_fn(context);
  for (ChoiceEvent& e : events) {
    CompletionChoiceResult& c = choices[static_cast<size_t>(e.index)];
    if (outputs.empty()) {
      c.text += e.text;
    } else {
      add_chat_text(*outputs[static_cast<size_t>(e.index)], e.text, e.token_ids, e.finish_reason, c);
      e.finish_reason.reset();  // mapped by add_chat_text
    }
    for (int32_t id : e.token_ids) c.token_texts.push_back(token_text(id));
    c.token_ids.insert(c.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
    if (c.logprobs) c.logprobs->insert(c.logprobs->end(), e.logprobs.begin(), e.logprobs.end());
    if (e.finish_reason) c.finish_reason = *e.finish_reason;
    if (!e.abort_reason.empty()) c.abort_reason = e.abort_reason;
  }
}

// Non-streamed: one JSON body once every choice has finished. Its head waits for it
// (HttpResponse::head_waits_for_body), so that a request the engine failed under gets a 500,
// not a 200 whose body is an error; a client that leaves meanwhile is noticed by the connection's
// read. With `keepalive` (the decode role, see handle_generation) the head goes first and a space
// (JSON ignores leading whitespace) follows every keep-alive interval while generating.
class WholeAnswer : public BodyStream {
 public:
  WholeAnswer(ServingContext& context, Generation g, std::optional<std::chrono::milliseconds> keepalive,
              std::shared_ptr<const engine::KvPayload> imported = nullptr)
      : context_(context), g_(std::move(g)), keepalive_(keepalive),
        ticket_(context.client_quota().acquire(g_.client, g_.sequences())),       // may throw: before any byte
        run_(std::make_unique<GenerationRun>(context, g_.prompts, g_.params,
                                             g_.skip_special_tokens, std::move(imported))) {  // may throw: before any byte
    const size_t num_choices = g_.prompts.size() * static_cast<size_t>(g_.params.n);
    choices_.resize(num_choices);
    if (g_.chat) {
      for (size_t i = 0; i < num_choices; ++i) outputs_.push_back(std::make_unique<ChatOutput>(g_.chat_output));
    }
    for (size_t i = 0; i < num_choices; ++i) {
      choices_[i].index = static_cast<int32_t>(i);
      if (!g_.echo_texts.empty()) choices_[i].text = g_.echo_texts[i / static_cast<size_t>(g_.params.n)];
      if (g_.params.logprobs >= 0) choices_[i].logprobs.emplace();
    }
  }
  void set_wakeup(std::function<void()> wakeup) override { run_->set_wakeup(std::move(wakeup)); }
  bool pump(std::string& out) override {
    const std::optional<std::string> failure = run_->engine_failure();  // before poll(): it sees every finish
    accumulate(context_, run_->poll(), choices_, outputs_);
    if (failure) {
      ticket_.reset();
      const ApiError error = engine_failed(*failure);
      status_ = error.status;
      out = error_body(error);
      return true;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!run_->finished()) {
      if (keepalive_ && now - last_write_ >= *keepalive_) {
        last_write_ = now;
        out = " ";
      }
      return false;
    }
    ticket_.reset();  // the share comes back before the client can see the answer
    const Usage usage = with_reasoning_tokens(run_->usage(), outputs_);
    out = (g_.chat ? chat_response(g_.id, g_.created, g_.model, choices_, usage, token_text_fn(context_))
                   : completion_response(g_.id, g_.created, g_.model, choices_, usage, token_text_fn(context_)))
              .dump();
    return true;
  }
  std::optional<int> status() const override { return status_; }

 private:
  ServingContext& context_;
  const Generation g_;
  const std::optional<std::chrono::milliseconds> keepalive_;  // unset: the head waits for the body
  std::optional<int> status_;  // set when the answer is an error
  std::unique_ptr<ClientQuota::Ticket> ticket_;  // released when the run ends, or after it is gone
  std::unique_ptr<GenerationRun> run_;
  std::vector<CompletionChoiceResult> choices_;
  std::vector<std::unique_ptr<ChatOutput>> outputs_;  // chat: one per choice
  std::chrono::steady_clock::time_point last_write_ = std::chrono::steady_clock::now();
};

// Streamed: SSE frames as tokens arrive. Chat choices open with a role chunk, echoed
// completions with the prompt's text; each choice ends with one finish_reason; then usage (if
// asked) and [DONE]. A failure after the head travels as an error frame, still ending in [DONE].
class SseAnswer : public BodyStream {
 public:
  SseAnswer(ServingContext& context, Generation g, std::shared_ptr<const engine::KvPayload> imported = nullptr)
      : token_text_(token_text_fn(context)), g_(std::move(g)),
        ticket_(context.client_quota().acquire(g_.client, g_.sequences())),      // may throw: before any byte
        run_(std::make_unique<GenerationRun>(context, g_.prompts, g_.params,
                                             g_.skip_special_tokens, std::move(imported))),  // may throw: before any byte
        opened_(g_.prompts.size() * static_cast<size_t>(g_.params.n), false),
        text_offsets_(opened_.size(), 0) {
    if (g_.chat) {
      for (size_t i = 0; i < opened_.size(); ++i) outputs_.push_back(std::make_unique<ChatOutput>(g_.chat_output));
    }
  }
  void set_wakeup(std::function<void()> wakeup) override { run_->set_wakeup(std::move(wakeup)); }
  bool pump(std::string& out) override {
    try {
      return step(out);
    } catch (const std::exception& e) {
      ApiError error{500, std::string("internal error while streaming: ") + e.what(), "internal_server_error", "", ""};
      out += "data: " + error_body(error) + "\n\n" + std::string(kSseDone);
      return true;
    }
  }

 private:
  bool step(std::string& out) {
    for (size_t i = 0; i < opened_.size(); ++i) {  // the first chunk of every choice
      if (opened_[i]) continue;
      opened_[i] = true;
      const auto index = static_cast<int32_t>(i);
      if (g_.chat) {
        out += sse_data(chat_chunk(g_.id, g_.created, g_.model, index, "assistant", "", nullptr, std::nullopt));
      } else if (!g_.echo_texts.empty()) {
        const std::string& prompt = g_.echo_texts[i / static_cast<size_t>(g_.params.n)];
        out += sse_data(completion_chunk(g_.id, g_.created, g_.model, index, prompt, nullptr, std::nullopt,
                                         token_text_));
        text_offsets_[i] += code_points(prompt);
      }
    }
    const std::optional<std::string> failure = run_->engine_failure();  // before poll(): it sees every finish
    std::vector<ChoiceEvent> events = run_->poll();
    if (failure) {  // an error event ends the stream, with no [DONE]: the answer is not complete
      ticket_.reset();
      out += "data: " + error_body(engine_failed(*failure)) + "\n\n";
      return true;
    }
    for (ChoiceEvent& e : events) {
      LogprobsDelta logprobs;
      const bool with_logprobs = g_.params.logprobs >= 0 && !e.logprobs.empty();
      if (with_logprobs) {
        logprobs.tokens = e.logprobs;
        for (int32_t id : e.token_ids) logprobs.texts.push_back(token_text_(id));
        logprobs.text_offset = text_offsets_[static_cast<size_t>(e.index)];
      }
      text_offsets_[static_cast<size_t>(e.index)] += code_points(e.text);
      if (g_.chat) {
        write_chat_event(e, with_logprobs ? &logprobs : nullptr, out);
        continue;
      }
      nlohmann::ordered_json chunk = completion_chunk(g_.id, g_.created, g_.model, e.index, e.text,
                                                      with_logprobs ? &logprobs : nullptr, e.finish_reason,
                                                      token_text_);
      add_abort_reason(chunk, e.abort_reason);
      out += sse_data(chunk);
    }
    if (!run_->finished()) return false;
    ticket_.reset();  // the share comes back before the client can see the end
    if (g_.include_usage) {
      const Usage usage = with_reasoning_tokens(run_->usage(), outputs_);
      out += sse_data(usage_chunk(g_.id, g_.created, g_.model, g_.chat, usage));
    }
    out += std::string(kSseDone);
    return true;
  }

  void write_chat_event(const ChoiceEvent& e, const LogprobsDelta* logprobs, std::string& out) {
    std::vector<nlohmann::ordered_json> chunks =
        chat_text_chunks(*outputs_[static_cast<size_t>(e.index)], g_.id, g_.created, g_.model, e.index, e.text,
                         e.token_ids, e.finish_reason, logprobs, token_text_);
    add_abort_reason(chunks.back(), e.abort_reason);  // the finishing chunk (there is always one)
    for (const auto& chunk : chunks) out += sse_data(chunk);
  }

  // Offsets count code points, as OpenAI's text_offset does.
  static int64_t code_points(const std::string& text) {
    return std::count_if(text.begin(), text.end(), [](char ch) { return (static_cast<unsigned char>(ch) & 0xC0) != 0x80; });
  }

  const TokenTextFn token_text_;  // a token's text (logprobs, echoed prompts' chunks)
  const Generation g_;
  std::unique_ptr<ClientQuota::Ticket> ticket_;  // released when the run ends, or after it is gone
  std::unique_ptr<GenerationRun> run_;
  std::vector<bool> opened_;
  std::vector<int64_t> text_offsets_;
  std::vector<std::unique_ptr<ChatOutput>> outputs_;  // chat: one per choice
};

// The answer of a validated request, decoding from `imported` when a prefill server's rows came.
void answer_generation(ServingContext& context, Generation g, ImportedRows imported,
                       std::chrono::milliseconds keepalive, HttpResponse& res) {
  if (g.stream) {
    res.content_type = "text/event-stream";
    res.headers.emplace_back("Cache-Control", "no-cache");
    res.stream = std::make_shared<SseAnswer>(context, std::move(g), std::move(imported));
  } else {
    res.content_type = "application/json";
    // A decode server's head goes first: the disaggregation router answers its client only once
    // it has it, and only then can that client's hang-up reach this server (the router drops the
    // call); a head held for the whole generation would run a departed client's request to its end.
    const bool head_first = context.role() == "decode";
    res.head_waits_for_body = !head_first;
    res.stream = std::make_shared<WholeAnswer>(
        context, std::move(g), head_first ? std::optional(keepalive) : std::nullopt, std::move(imported));
  }
}

// Answers through `respond` at once, or once the request's KV pull ended (on its thread).
void handle_generation(ServingContext& context, const HttpRequest& req, const Respond& respond, bool chat,
                       std::chrono::milliseconds keepalive) {
  context.refuse_if_unavailable();
  Generation g = chat ? chat_generation(context, parse_chat_request(req.body, context.limits()))
                      : completion_generation(context, req.body);
  g.model = context.limits().model_name;
  g.client = client_address(context, req);  // a router's client behind a router
  g.params.client = fair_share_client(g.client, g.user);
  g.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  answer_for_role(
      context, req, std::move(g), respond,
      [keepalive](ServingContext& context, Generation g, ImportedRows imported, HttpResponse& res) {
        answer_generation(context, std::move(g), std::move(imported), keepalive, res);
      },
      error_body);
}

}  // namespace

void add_generation_routes(Router& router, ContextAccess context, std::chrono::milliseconds keepalive_interval) {
  // Async only for a request that names a KV source (a decode role's pull answers later).
  router.add_async(
      "POST", "/v1/completions",
      [context, keepalive_interval](const HttpRequest& req, const Respond& respond) {
        handle_generation(context(), req, respond, /*chat=*/false, keepalive_interval);
      },
      names_kv_source);
  router.add_async(
      "POST", "/v1/chat/completions",
      [context, keepalive_interval](const HttpRequest& req, const Respond& respond) {
        handle_generation(context(), req, respond, /*chat=*/true, keepalive_interval);
      },
      names_kv_source);
}

}  // namespace tachyon::server
