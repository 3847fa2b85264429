#include "tachyon/server/http/shaped_answer.h"

#include <algorithm>

#include "tachyon/server/http/generation_run.h"
#include "tachyon/server/http/http_routes.h"

namespace tachyon::server {
namespace {

class ShapedAnswer : public BodyStream {
 public:
  // `imported`: the prompt's rows a decode server pulled (http/pd_roles.h), or null. `keepalive`:
  // a non-streamed answer whose head went first writes a space this often until its body.
  ShapedAnswer(ServingContext& context, Generation g, ImportedRows imported,
               std::optional<std::chrono::milliseconds> keepalive, std::unique_ptr<AnswerShape> shape)
      : g_(std::move(g)), keepalive_(keepalive),
        ticket_(context.client_quota().acquire(g_.client, g_.sequences())),  // may throw: before any byte
        run_(std::make_unique<GenerationRun>(context, g_.prompts, g_.params, g_.skip_special_tokens,
                                             std::move(imported))),  // ditto
        shape_(std::move(shape)), output_(g_.chat_output, [this] { return shape_->tool_call_id(); }),
        token_text_(token_text_fn(context)) {}

  void set_wakeup(std::function<void()> wakeup) override { run_->set_wakeup(std::move(wakeup)); }

  bool pump(std::string& out) override {
    if (!g_.stream) return step(out);
    try {
      return step(out);
    } catch (const std::exception& e) {
      const std::string why = std::string("internal error while streaming: ") + e.what();
      out += shape_->error_event({500, why, "api_error", "", ""});
      return true;
    }
  }

  std::optional<int> status() const override { return status_; }

 private:
  // Ends the answer with an error: its body, or after the events so far when streamed.
  bool fail(int status, const std::string& message, const std::string& type, std::string& out,
            const std::string& events) {
    ticket_.reset();
    status_ = status;
    const ApiError error{status, message, type, "", ""};
    out += g_.stream ? events + shape_->error_event(error) : shape_->error_body(error);
    return true;
  }

  bool step(std::string& out) {
    std::string events;
    if (!started_) {
      started_ = true;
      events += shape_->start(run_->prompt_tokens());
    }
    const std::optional<std::string> failure = run_->engine_failure();  // before poll(): it sees every finish
    std::vector<ChoiceEvent> polled = run_->poll();
    // The engine failed under this request: an error is its answer.
    if (failure) return fail(500, *failure, "api_error", out, "");
    for (ChoiceEvent& e : polled) {
      std::vector<ChatPiece> pieces = output_.push(e.text, e.token_ids);
      if (e.finish_reason) {
        std::vector<ChatPiece> last = output_.finish();
        pieces.insert(pieces.end(), std::make_move_iterator(last.begin()), std::make_move_iterator(last.end()));
        finish_reason_ = output_.finish_reason(*e.finish_reason);
        stop_string_ = e.stop_string;
        abort_reason_ = e.abort_reason;
      }
      if (g_.params.logprobs < 0) {
        events += shape_->add(pieces, nullptr);
        continue;
      }
      const nlohmann::ordered_json entries = released_logprobs(e);
      events += shape_->add(pieces, &entries);
    }
    // The engine gave up on the answer (its forced tool call's schema could not be followed): no
    // API here has a finish for that, and a cut call is no answer, so it is an error naming why.
    if (run_->finished() && !abort_reason_.empty()) {
      return fail(400, abort_reason_, "invalid_request_error", out, events);
    }
    if (run_->finished()) {
      ticket_.reset();  // the share comes back before the client can see the end
      events += shape_->finish(finish_reason_, stop_string_, with_reasoning_tokens(run_->usage(), output_));
    }
    if (g_.stream) {
      out += events;
    } else if (run_->finished()) {
      out = shape_->whole();
    } else if (const auto now = std::chrono::steady_clock::now(); keepalive_ && now - last_write_ >= *keepalive_) {
      last_write_ = now;
      out = " ";  // JSON ignores leading whitespace
    }
    return run_->finished();
  }

  // The logprob entries of the output text's tokens that e (pushed into output_) releases: every
  // token's once the answer has no reasoning before it (ContentTokens).
  nlohmann::ordered_json released_logprobs(const ChoiceEvent& e) {
    for (size_t i = 0; i < e.logprobs.size() && i < e.token_ids.size(); ++i) {
      answer_logprobs_.tokens.push_back(e.logprobs[i]);
      answer_logprobs_.texts.push_back(token_text_(e.token_ids[i]));
    }
    const auto [begin, end] = content_tokens_.next(e.token_ids.size(), output_.reasoning_tokens());
    LogprobsDelta released;
    const size_t last = std::min(end, answer_logprobs_.tokens.size());
    for (size_t i = begin; i < last; ++i) {
      released.tokens.push_back(answer_logprobs_.tokens[i]);
      released.texts.push_back(answer_logprobs_.texts[i]);
    }
    return chat_logprobs(released, token_text_)["content"];
  }

  const Generation g_;
  const std::optional<std::chrono::milliseconds> keepalive_;  // unset: the head waits for the body
  std::chrono::steady_clock::time_point last_write_ = std::chrono::steady_clock::now();
  std::optional<int> status_;  // set when the answer is an error
  std::unique_ptr<ClientQuota::Ticket> ticket_;  // released when the run ends, or after it is gone
  std::unique_ptr<GenerationRun> run_;
  std::unique_ptr<AnswerShape> shape_;
  ChatOutput output_;
  const TokenTextFn token_text_;
  LogprobsDelta answer_logprobs_;  // every token's of the answer so far, with its text (logprobs asked for)
  ContentTokens content_tokens_;
  bool started_ = false;
  std::string finish_reason_ = "stop";
  std::string stop_string_;
  std::string abort_reason_;  // set when the engine ended the answer by itself
};

}  // namespace

void answer_in_shape(ServingContext& context, Generation g, ImportedRows imported, std::chrono::milliseconds keepalive,
                     std::unique_ptr<AnswerShape> shape, HttpResponse& res) {
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
  res.stream = std::make_shared<ShapedAnswer>(context, std::move(g), std::move(imported), head_first_keepalive,
                                              std::move(shape));
}

}  // namespace tachyon::server
