// POST /v1/completions and /v1/chat/completions. Everything is validated and tokenized before
// anything is submitted or the first SSE byte is sent; a failure after that point (the engine
// refusing, a stream cut) sends an error frame and still ends with [DONE].
#include <httplib.h>

#include <algorithm>
#include <memory>

#include "tachyon/server/http/generation_run.h"
#include "tachyon/server/http/http_server.h"
#include "tachyon/server/http/http_util.h"

namespace tachyon::server {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

// What one route needs from a validated request, chat and completions alike.
struct Generation {
  bool chat = false;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::string> echo_texts;  // completions with echo: the prompt text per prompt
  core::SamplingParams params;
  bool stream = false;
  bool include_usage = false;
  std::string id;
  std::string model;
  int64_t created = 0;
};

TokenTextFn token_text_fn(const ServingContext& context) {
  return [&tokenizer = context.tokenizer()](int32_t id) { return tokenizer.decode(std::span<const int32_t>(&id, 1)); };
}

Generation completion_generation(ServingContext& context, const std::string& body) {
  CompletionRequest request = parse_completion_request(body, context.limits());
  Generation g;
  g.params = request.params;
  g.stream = request.stream;
  g.include_usage = request.include_usage;
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
  g.id = make_request_id("cmpl");
  return g;
}

Generation chat_generation(ServingContext& context, const std::string& body) {
  ChatRequest request = parse_chat_request(body, context.limits());
  if (context.chat_template() == nullptr) {
    throw ApiException(bad_request("messages", "this model has no chat template; use /v1/completions"));
  }
  tokenizer::ChatTemplateInputs inputs;
  inputs.messages = request.messages;
  inputs.tools = request.tools;
  inputs.add_generation_prompt = request.add_generation_prompt;
  inputs.extra = request.chat_template_kwargs;
  std::string rendered;
  try {
    rendered = context.chat_template()->render(inputs);
  } catch (const Error& e) {
    throw ApiException(bad_request("messages", std::string("the chat template refused these messages: ") + e.what()));
  }
  Generation g;
  g.chat = true;
  g.prompts.push_back(context.tokenizer().encode(rendered, /*add_special_tokens=*/false));
  g.params = request.params;
  g.params.max_tokens =
      resolve_max_tokens(static_cast<int64_t>(g.prompts[0].size()), request.max_tokens, context.limits());
  g.stream = request.stream;
  g.include_usage = request.include_usage;
  g.id = make_request_id("chatcmpl");
  return g;
}

// The whole answer of a non-streamed request, built up as events arrive.
struct WholeAnswer {
  std::vector<CompletionChoiceResult> choices;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  bool done = false;
};

void accumulate(const ServingContext& context, std::vector<ChoiceEvent>&& events, std::vector<CompletionChoiceResult>& choices) {
  for (ChoiceEvent& e : events) {
    CompletionChoiceResult& c = choices[static_cast<size_t>(e.index)];
    c.text += e.text;
    for (int32_t id : e.token_ids) c.token_texts.push_back(context.tokenizer().decode(std::span<const int32_t>(&id, 1)));
    c.token_ids.insert(c.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
    if (c.logprobs) c.logprobs->insert(c.logprobs->end(), e.logprobs.begin(), e.logprobs.end());
    if (e.finish_reason) c.finish_reason = *e.finish_reason;
  }
}

// Non-streamed: one JSON body once every choice has finished. It is sent chunked, with a space
// (JSON ignores leading whitespace) every second while generating: cpp-httplib learns that a
// client has gone only when a write fails, and a request whose client has gone must be aborted,
// not run to max_tokens.
void respond_whole(ServingContext& context, const Generation& g, std::chrono::milliseconds keepalive,
                   httplib::Response& res) {
  auto run = std::make_shared<GenerationRun>(context, g.prompts, g.params);  // may throw: before any byte
  auto answer = std::make_shared<WholeAnswer>();
  const size_t num_choices = g.prompts.size() * static_cast<size_t>(g.params.n);
  answer->choices.resize(num_choices);
  for (size_t i = 0; i < num_choices; ++i) {
    answer->choices[i].index = static_cast<int32_t>(i);
    if (!g.echo_texts.empty()) answer->choices[i].text = g.echo_texts[i / static_cast<size_t>(g.params.n)];
    if (g.params.logprobs >= 0) answer->choices[i].logprobs.emplace();
  }
  res.set_chunked_content_provider("application/json", [&context, g, run, answer, keepalive](size_t,
                                                                                              httplib::DataSink& sink) {
    if (answer->done) return false;
    accumulate(context, run->poll(kPollInterval), answer->choices);
    const auto now = std::chrono::steady_clock::now();
    if (!run->finished()) {
      if (now - answer->last_write < keepalive) return true;
      answer->last_write = now;
      return sink.write(" ", 1);  // false: the client left, and dropping `run` aborts it
    }
    Usage usage{run->prompt_tokens(), run->completion_tokens()};
    const std::string body =
        (g.chat ? chat_response(g.id, g.created, g.model, answer->choices, usage, token_text_fn(context))
                : completion_response(g.id, g.created, g.model, answer->choices, usage, token_text_fn(context)))
            .dump();
    sink.write(body.data(), body.size());
    answer->done = true;
    sink.done();
    return true;
  });
}

bool stream_step(ServingContext& context, const Generation& g, GenerationRun& run, std::vector<bool>& sent_role,
                 std::vector<int64_t>& text_offsets, bool& done, httplib::DataSink& sink);

// Streamed: SSE frames as tokens arrive; the provider runs on this connection's thread.
void respond_stream(ServingContext& context, const Generation& g, httplib::Response& res) {
  auto run = std::make_shared<GenerationRun>(context, g.prompts, g.params);  // may throw: before any byte
  auto sent_role = std::make_shared<std::vector<bool>>(g.prompts.size() * static_cast<size_t>(g.params.n), false);
  auto text_offsets = std::make_shared<std::vector<int64_t>>(sent_role->size(), 0);
  auto done = std::make_shared<bool>(false);
  res.set_chunked_content_provider("text/event-stream", [&context, g, run, sent_role, text_offsets, done](
                                                            size_t offset, httplib::DataSink& sink) {
    if (*done) return false;
    try {
      return stream_step(context, g, *run, *sent_role, *text_offsets, *done, sink);
    } catch (const std::exception& e) {
      // Headers are gone already: the failure travels as an error frame, and the stream still
      // ends the way clients expect.
      ApiError error{500, std::string("internal error while streaming: ") + e.what(), "internal_server_error", "", ""};
      const std::string frame = "data: " + error_body(error) + "\n\n" + std::string(kSseDone);
      sink.write(frame.data(), frame.size());
      *done = true;
      sink.done();
      return true;
    }
  });
}

// One turn of the SSE provider: the role chunks, then whatever the run has, then the end.
bool stream_step(ServingContext& context, const Generation& g, GenerationRun& run, std::vector<bool>& sent_role,
                 std::vector<int64_t>& text_offsets, bool& done, httplib::DataSink& sink) {
  auto write = [&](const std::string& frame) { return sink.write(frame.data(), frame.size()); };
  if (g.chat) {  // the role goes first, in a chunk of its own, for every choice
    for (size_t i = 0; i < sent_role.size(); ++i) {
      if (sent_role[i]) continue;
      sent_role[i] = true;
      if (!write(sse_data(chat_chunk(g.id, g.created, g.model, static_cast<int32_t>(i), "assistant", "", nullptr,
                                     std::nullopt)))) {
        return false;
      }
    }
  }
  for (ChoiceEvent& e : run.poll(kPollInterval)) {
    LogprobsDelta logprobs;
    const bool with_logprobs = g.params.logprobs >= 0 && !e.logprobs.empty();
    if (with_logprobs) {
      logprobs.tokens = e.logprobs;
      for (int32_t id : e.token_ids) logprobs.texts.push_back(context.tokenizer().decode(std::span<const int32_t>(&id, 1)));
      logprobs.text_offset = text_offsets[static_cast<size_t>(e.index)];
    }
    // Offsets count code points, as OpenAI's text_offset does.
    text_offsets[static_cast<size_t>(e.index)] += std::count_if(
        e.text.begin(), e.text.end(), [](char ch) { return (static_cast<unsigned char>(ch) & 0xC0) != 0x80; });
    auto chunk = g.chat ? chat_chunk(g.id, g.created, g.model, e.index, std::nullopt, e.text,
                                     with_logprobs ? &logprobs : nullptr, e.finish_reason, token_text_fn(context))
                        : completion_chunk(g.id, g.created, g.model, e.index, e.text,
                                           with_logprobs ? &logprobs : nullptr, e.finish_reason, token_text_fn(context));
    if (!write(sse_data(chunk))) return false;  // the client left: dropping `run` aborts the rest
  }
  if (!run.finished()) return true;  // called again
  if (g.include_usage && !write(sse_data(usage_chunk(g.id, g.created, g.model, g.chat,
                                                     {run.prompt_tokens(), run.completion_tokens()})))) {
    return false;
  }
  write(std::string(kSseDone));
  done = true;
  sink.done();
  return true;
}

void handle_generation(ServingContext& context, const httplib::Request& req, httplib::Response& res, bool chat,
                       std::chrono::milliseconds keepalive) {
  if (context.draining()) throw ApiException({503, "the server is shutting down", "service_unavailable", "", ""});
  Generation g = chat ? chat_generation(context, req.body) : completion_generation(context, req.body);
  g.model = context.limits().model_name;
  g.created = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  if (g.stream) {
    respond_stream(context, g, res);
  } else {
    respond_whole(context, g, keepalive, res);
  }
}

}  // namespace

void HttpServer::add_generation_routes() {
  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(context(), req, res, /*chat=*/false, options_.keepalive_interval);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generation(context(), req, res, /*chat=*/true, options_.keepalive_interval);
  });
}

}  // namespace tachyon::server
