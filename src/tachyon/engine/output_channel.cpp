#include "tachyon/engine/output_channel.h"

#include <algorithm>

namespace tachyon::engine {

std::optional<RequestOutput> OutputChannel::take(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  if (finished_taken_) return std::nullopt;
  if (!ready_.wait_for(lock, timeout, [&] { return pending_.has_value(); })) return std::nullopt;
  RequestOutput out = std::move(*pending_);
  pending_.reset();
  finished_taken_ = out.finished;
  return out;
}

void OutputChannel::push(RequestOutput&& delta) {
  if (callback_) {
    callback_(std::move(delta));
    return;
  }
  {
    std::lock_guard lock(mutex_);
    if (pending_) {
      merge(*pending_, std::move(delta));
    } else {
      pending_ = std::move(delta);
    }
  }
  ready_.notify_all();
}

void OutputChannel::merge(RequestOutput& into, RequestOutput&& delta) {
  into.finished = delta.finished;
  into.num_prompt_tokens = delta.num_prompt_tokens;
  into.num_prefix_hit_tokens = delta.num_prefix_hit_tokens;
  if (!into.first_scheduled) into.first_scheduled = delta.first_scheduled;
  if (!delta.error.empty()) into.error = std::move(delta.error);
  for (CompletionDelta& d : delta.completions) {
    auto it = std::find_if(into.completions.begin(), into.completions.end(),
                           [&](const CompletionDelta& c) { return c.index == d.index; });
    if (it == into.completions.end()) {
      into.completions.push_back(std::move(d));
      continue;
    }
    it->token_ids.insert(it->token_ids.end(), d.token_ids.begin(), d.token_ids.end());
    it->logprobs.insert(it->logprobs.end(), std::make_move_iterator(d.logprobs.begin()),
                        std::make_move_iterator(d.logprobs.end()));
    if (d.finish_reason != FinishReason::kNone) {
      it->finish_reason = d.finish_reason;
      it->stop_token = d.stop_token;
      it->abort_reason = std::move(d.abort_reason);
    }
  }
}

}  // namespace tachyon::engine
