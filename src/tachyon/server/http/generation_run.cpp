#include "tachyon/server/http/generation_run.h"

#include <algorithm>
#include <span>

#include "tachyon/server/pd_metrics.h"

namespace tachyon::server {
namespace {

const char* finish_name(engine::FinishReason reason) { return engine::finish_reason_name(reason); }

// With imported rows where the engine takes them; a payload it refuses means computing the prompt.
int64_t submit_one(ServingContext& context, const std::vector<int32_t>& prompt, const core::SamplingParams& params,
                   const std::shared_ptr<engine::OutputChannel>& channel, const engine::KvPayload* imported) {
  if (imported != nullptr) {
    try {
      const int64_t id = context.engine().submit_imported(*imported, params, channel);
      if (context.pd_metrics() != nullptr) context.pd_metrics()->on_import();
      return id;
    } catch (const engine::KvTransferError&) {
      if (context.pd_metrics() != nullptr) context.pd_metrics()->on_recompute(RecomputeReason::kRowsRefused);
    }
  }
  return context.engine().submit(prompt, params, channel);
}

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

TokenTextFn token_text_fn(const ServingContext& context) {
  return [&tokenizer = context.tokenizer()](int32_t id) { return tokenizer.decode(std::span<const int32_t>(&id, 1)); };
}

GenerationRun::GenerationRun(ServingContext& context, const std::vector<std::vector<int32_t>>& prompts,
                             const core::SamplingParams& params, bool skip_special_tokens,
                             std::shared_ptr<const engine::KvPayload> imported)
    : context_(context), n_(params.n), skip_special_tokens_(skip_special_tokens),
      stop_token_ids_(params.stop_token_ids.begin(), params.stop_token_ids.end()), shared_(std::make_shared<Shared>()), start_(std::chrono::steady_clock::now()) {
  context.refuse_if_unavailable();
  const size_t num_choices = prompts.size() * static_cast<size_t>(params.n);
  shared_->pending.resize(num_choices);
  shared_->cached.resize(prompts.size());
  choices_.resize(num_choices);
  for (size_t p = 0; p < prompts.size(); ++p) {
    const int32_t base = static_cast<int32_t>(p) * params.n;
    auto shared = shared_;
    auto channel = std::make_shared<engine::OutputChannel>([shared, base, p](engine::RequestOutput&& out) {
      std::function<void()> wakeup;
      {
        std::lock_guard lock(shared->mutex);
        if (!shared->cached[p] && !out.completions.empty()) shared->cached[p] = out.num_prefix_hit_tokens;
        for (engine::CompletionDelta& d : out.completions) {
          Pending& pending = shared->pending[static_cast<size_t>(base + d.index)];
          pending.token_ids.insert(pending.token_ids.end(), d.token_ids.begin(), d.token_ids.end());
          pending.logprobs.insert(pending.logprobs.end(), d.logprobs.begin(), d.logprobs.end());
          if (d.finish_reason != engine::FinishReason::kNone) {
            pending.finish_reason = d.finish_reason;
            pending.abort_reason = std::move(d.abort_reason);
          }
        }
        if (!shared->first_scheduled) shared->first_scheduled = out.first_scheduled;
        if (!out.error.empty()) shared->engine_failure = out.error;
        shared->dirty = true;
        wakeup = shared->wakeup;
      }
      if (wakeup) wakeup();
    });
    int64_t id = 0;
    try {
      id = submit_one(context, prompts[p], params, channel, p == 0 ? imported.get() : nullptr);
    } catch (const engine::QueueFullError& e) {
      throw ApiException({503, e.what(), "service_unavailable", "", ""});
    } catch (const engine::EngineFailedError& e) {  // failed since refuse_if_unavailable() looked
      throw ApiException({503, e.what(), "service_unavailable", "", "engine_failed"});
    } catch (const Error& e) {
      throw ApiException({400, e.what(), "invalid_request_error", "", ""});
    }
    channels_.push_back(channel);
    request_ids_.push_back(id);
    if (context.metrics().per_request_enabled()) context.metrics().request_started(std::to_string(id));
    prompt_tokens_ += static_cast<int64_t>(prompts[p].size());
    prompt_lengths_.push_back(static_cast<int64_t>(prompts[p].size()));
    for (int32_t c = 0; c < params.n; ++c) {
      Choice& choice = choices_[static_cast<size_t>(base + c)];
      choice.request_id = id;
      choice.completion = c;
      choice.text = std::make_unique<app::TextStream>(context.tokenizer(), params.stop, params.include_stop_str_in_output,
                                                      skip_special_tokens, params.min_tokens);
    }
  }
  context.metrics().on_prompt_tokens(prompt_tokens_);
}

GenerationRun::~GenerationRun() {
  // Channels go with the run: the engine aborts what is unfinished at its next step.
  channels_.clear();
  for (const Choice& choice : choices_) {
    if (!choice.finished) context_.metrics().on_request_finished(engine::FinishReason::kAbort);
  }
  if (context_.metrics().per_request_enabled()) {
    for (int64_t id : request_ids_) context_.metrics().request_ended(std::to_string(id));
  }
}

int64_t GenerationRun::cached_prompt_tokens() const {
  std::lock_guard lock(shared_->mutex);
  int64_t cached = 0;
  for (const std::optional<int64_t>& c : shared_->cached) cached += c.value_or(0);
  return cached;
}

void GenerationRun::set_wakeup(std::function<void()> wakeup) {
  std::lock_guard lock(shared_->mutex);
  shared_->wakeup = std::move(wakeup);
}

std::optional<std::string> GenerationRun::engine_failure() const {
  std::lock_guard lock(shared_->mutex);
  if (shared_->engine_failure.empty()) return std::nullopt;
  return shared_->engine_failure;
}

void GenerationRun::abort() {
  for (int64_t id : request_ids_) context_.engine().abort(id);
}

std::vector<ChoiceEvent> GenerationRun::poll() {
  std::vector<Pending> drained;
  {
    std::lock_guard lock(shared_->mutex);
    if (!shared_->dirty) return {};
    shared_->dirty = false;
    drained.resize(shared_->pending.size());
    for (size_t i = 0; i < drained.size(); ++i) std::swap(drained[i], shared_->pending[i]);
  }
  std::vector<ChoiceEvent> events;
  for (size_t i = 0; i < drained.size(); ++i) {
    if (choices_[i].finished) continue;
    if (drained[i].token_ids.empty() && drained[i].finish_reason == engine::FinishReason::kNone) continue;
    events.push_back(drain_choice(static_cast<int32_t>(i), drained[i]));
  }
  return events;
}

ChoiceEvent GenerationRun::drain_choice(int32_t index, Pending& pending) {
  Choice& choice = choices_[static_cast<size_t>(index)];
  ChoiceEvent event;
  event.index = index;
  const auto now = std::chrono::steady_clock::now();
  if (!pending.token_ids.empty()) {
    if (choice.tokens == 0) {
      choice.first_token = now;
      context_.metrics().observe_ttft(seconds_between(start_, now));
      std::optional<std::chrono::steady_clock::time_point> scheduled;
      {
        std::lock_guard lock(shared_->mutex);
        scheduled = shared_->first_scheduled;
      }
      if (scheduled && index % n_ == 0) {  // once per prompt
        context_.metrics().observe_queue_time(seconds_between(start_, *scheduled));
        context_.metrics().observe_prefill_time(seconds_between(*scheduled, now));
      }
    } else {
      context_.metrics().observe_inter_token_latency(seconds_between(choice.last_token, now) /
                                                      static_cast<double>(pending.token_ids.size()));
    }
    choice.last_token = now;
    choice.tokens += static_cast<int64_t>(pending.token_ids.size());
    if (context_.metrics().per_request_enabled()) {
      const size_t prompt = static_cast<size_t>(index / n_);
      context_.metrics().request_context_tokens(std::to_string(choice.request_id),
                                                prompt_lengths_[prompt] + choice.tokens);
    }
    completion_tokens_ += static_cast<int64_t>(pending.token_ids.size());
    context_.metrics().on_generation_tokens(static_cast<int64_t>(pending.token_ids.size()));
  }
  event.token_ids = std::move(pending.token_ids);
  event.logprobs = std::move(pending.logprobs);
  engine::FinishReason reason = pending.finish_reason;
  std::span<const int32_t> shown(event.token_ids);
  if (!skip_special_tokens_ && reason == engine::FinishReason::kStop && !shown.empty() && ends_answer(shown.back())) {
    shown = shown.first(shown.size() - 1);  // the answer's end token is no text, special or not
  }
  event.text = choice.text->push(shown);
  if (choice.text->stopped()) {
    if (reason == engine::FinishReason::kNone) context_.engine().abort(choice.request_id, choice.completion);
    reason = engine::FinishReason::kStop;
    event.stop_string = choice.text->stop_string();
  } else if (reason != engine::FinishReason::kNone) {
    event.text += choice.text->finish();
  }
  if (reason != engine::FinishReason::kNone) {
    choice.finished = true;
    ++num_finished_;
    event.finish_reason = finish_name(reason);
    if (reason == engine::FinishReason::kAbort) event.abort_reason = std::move(pending.abort_reason);
    record_finish(choice, reason);
  }
  return event;
}

bool GenerationRun::ends_answer(int32_t token) const {
  return token == context_.eos_token_id() ||
         std::find(stop_token_ids_.begin(), stop_token_ids_.end(), token) != stop_token_ids_.end();
}

void GenerationRun::record_finish(const Choice& choice, engine::FinishReason reason) {
  ServerMetrics& metrics = context_.metrics();
  metrics.on_request_finished(reason);
  const double e2e = seconds_between(start_, std::chrono::steady_clock::now());
  metrics.observe_e2e_latency(e2e);
  if (choice.tokens > 1) {
    const double decode = seconds_between(choice.first_token, std::chrono::steady_clock::now());
    metrics.observe_decode_time(decode);
    metrics.observe_time_per_output_token(decode / static_cast<double>(choice.tokens - 1));
  }
}

}  // namespace tachyon::server
