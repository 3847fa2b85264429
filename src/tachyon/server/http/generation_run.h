// GenerationRun: the server's consumer of one HTTP request's generations (several prompts, n
// choices each). It submits them with one callback channel per prompt; the engine thread's
// callbacks merge deltas into per-choice pending state (a slow client costs only its own
// tokens) and wake the answer's connection, which polls events on a worker: text cut by stop
// strings (TextStream), token ids, logprobs, and exactly one finish reason per choice. Destroying the run drops its channels, so
// the engine aborts whatever is unfinished at its next step (DESIGN rule 1), and counts each
// unfinished choice as aborted in the metrics (a client that left).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "tachyon/engine/output_channel.h"
#include "tachyon/app/text_stream.h"
#include "tachyon/server/http/serving_context.h"
#include "tachyon/server/openai_responses.h"

namespace tachyon::server {

struct ChoiceEvent {
  int32_t index = 0;  // prompt_index * n + completion index
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<core::SampledToken> logprobs;
  std::optional<std::string> finish_reason;  // "stop", "length" or "abort", once
  std::string stop_string;                   // with finish "stop": the stop string that ended it, else ""
  // With finish "abort": why the engine ended the choice by itself (CompletionDelta::abort_reason);
  // "" when the client, a stop string or shutdown aborted it.
  std::string abort_reason;
};

// The text of one token (a logprobs entry's `token`, a choice's token_texts): the id decoded alone.
TokenTextFn token_text_fn(const ServingContext& context);

class GenerationRun {
 public:
  // Submits every prompt; throws ApiException (503) when the queue is full or the server drains.
  // skip_special_tokens false keeps special tokens in the text (a chat answer whose tool-call or
  // reasoning markers are special tokens) except the one that ended the answer (EOS or a stop
  // token id), as vLLM does.
  // `imported`: the one prompt's KV rows pulled from a prefill server (http/pd_roles.h); when
  // this engine cannot take them, the prompt is computed here.
  GenerationRun(ServingContext& context, const std::vector<std::vector<int32_t>>& prompts,
                const core::SamplingParams& params, bool skip_special_tokens = true,
                std::shared_ptr<const engine::KvPayload> imported = nullptr);
  ~GenerationRun();
  GenerationRun(const GenerationRun&) = delete;
  GenerationRun& operator=(const GenerationRun&) = delete;

  // New output since the last poll; empty when there is none. Never waits: set_wakeup says when.
  std::vector<ChoiceEvent> poll();
  // Called on the engine's thread after each step that brought this run news; it must be
  // cheap and never block (the HTTP connection posts a pump). Replaces any earlier one.
  void set_wakeup(std::function<void()> wakeup);
  bool finished() const { return num_finished_ == static_cast<int>(choices_.size()); }
  // Set once the engine failed (engine/engine_failure.h): why. Every choice has then finished
  // ("abort") by the next poll(), and the answer is this error instead.
  std::optional<std::string> engine_failure() const;
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const { return completion_tokens_; }
  // Of prompt_tokens(), those the engine served from its prefix cache: each prompt's count as its
  // first output reported it (RequestOutput::num_prefix_hit_tokens); 0 before that.
  int64_t cached_prompt_tokens() const;
  Usage usage() const { return {prompt_tokens_, completion_tokens_, cached_prompt_tokens()}; }
  void abort();  // every unfinished choice ends with "abort" at the engine's next step

 private:
  struct Pending {  // filled by the engine thread, drained by poll()
    std::vector<int32_t> token_ids;
    std::vector<core::SampledToken> logprobs;
    engine::FinishReason finish_reason = engine::FinishReason::kNone;
    std::string abort_reason;
  };
  struct Shared {
    std::mutex mutex;
    std::vector<Pending> pending;  // [num_choices]
    bool dirty = false;
    std::optional<std::chrono::steady_clock::time_point> first_scheduled;
    std::function<void()> wakeup;
    std::string engine_failure;  // RequestOutput::error of any of the run's requests
    std::vector<std::optional<int64_t>> cached;  // [num_prompts] prefix-cache hits, from the first output
  };
  struct Choice {
    int64_t request_id = 0;
    int32_t completion = 0;
    std::unique_ptr<app::TextStream> text;
    bool finished = false;
    std::chrono::steady_clock::time_point last_token;
    std::chrono::steady_clock::time_point first_token;
    int64_t tokens = 0;
  };

  ChoiceEvent drain_choice(int32_t index, Pending& pending);
  bool ends_answer(int32_t token) const;
  void record_finish(const Choice& choice, engine::FinishReason reason);

  ServingContext& context_;
  int32_t n_ = 1;
  bool skip_special_tokens_ = true;
  std::vector<int32_t> stop_token_ids_;
  std::shared_ptr<Shared> shared_;
  std::vector<std::shared_ptr<engine::OutputChannel>> channels_;
  std::vector<int64_t> request_ids_;
  std::vector<int64_t> prompt_lengths_;  // per prompt
  std::vector<Choice> choices_;
  int num_finished_ = 0;
  int64_t prompt_tokens_ = 0;
  int64_t completion_tokens_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace tachyon::server
