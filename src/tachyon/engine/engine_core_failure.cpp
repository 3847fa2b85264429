// EngineCore's failure path (engine/engine_failure.h): a step that throws fails the engine for
// good. Kept apart from engine_core.cpp so that the step loop stays on one screen; step() calls
// in when its body throws. Test: tests/unit/test_engine_failure.cpp.
#include <algorithm>
#include <cstdio>

#include "tachyon/engine/engine_core.h"

namespace tachyon::engine {

std::optional<std::string> EngineCore::failure() {
  std::lock_guard lock(inbox_mutex_);
  return failure_;
}

// The clients hear first (their channels get the error), then the bookkeeping frees what it can:
// the throw may have left it half updated, and a second failure here must not silence anyone.
void EngineCore::fail(const std::string& what) {
  const std::string message = engine_failure_message(what);
  std::fprintf(stderr, "[tachyon] %s; failing every request\n", message.c_str());
  std::vector<Submission> queued;
  {
    std::lock_guard lock(inbox_mutex_);
    failure_ = message;
    failed_ = true;
    queued.swap(inbox_);
    abort_inbox_.clear();
  }
  {
    std::lock_guard lock(stats_mutex_);
    stats_.failed = true;  // before anyone hears: a client that reads /metrics after its error sees it
  }
  fail_queued(queued, message);
  std::vector<int64_t> ids;
  for (const auto& [id, request] : active_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (int64_t id : ids) {
    ActiveRequest& request = active_.at(id);
    RequestOutput out;
    out.request_id = id;
    out.finished = true;
    out.error = message;
    for (const auto& sequence : request.sequences) {
      if (sequence->finished()) continue;
      CompletionDelta delta;
      delta.index = sequence->index;
      delta.finish_reason = FinishReason::kAbort;
      out.completions.push_back(std::move(delta));
    }
    if (auto channel = request.channel.lock()) channel->push(std::move(out));
  }
  try {
    for (int64_t id : ids) {
      for (auto& sequence : active_.at(id).sequences) {
        if (!sequence->finished()) scheduler_.abort(sequence.get());
      }
      finish_request(id);
    }
    pending_imports_.clear();
    publish_stats();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[tachyon] the failed engine could not free every request's KV blocks: %s\n", e.what());
  }
  std::lock_guard lock(stats_mutex_);
  stats_.requests_aborted += static_cast<int64_t>(ids.size() + queued.size());
}

// Submissions the engine never admitted: their channels get the error, a prefill's lease its release.
void EngineCore::fail_queued(std::vector<Submission>& submissions, const std::string& message) {
  for (Submission& submission : submissions) {
    if (submission.export_kv) leases_.forget(submission.request_id);
    RequestOutput out;
    out.request_id = submission.request_id;
    out.finished = true;
    out.error = message;
    for (int32_t index = 0; index < submission.params->n; ++index) {
      CompletionDelta delta;
      delta.index = index;
      delta.finish_reason = FinishReason::kAbort;
      out.completions.push_back(std::move(delta));
    }
    if (auto channel = submission.channel.lock()) channel->push(std::move(out));
  }
}

}  // namespace tachyon::engine
