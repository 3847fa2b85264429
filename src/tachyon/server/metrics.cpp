// ServerMetrics: see metrics.h. Series names follow vLLM's `vllm:*` with the `tachyon:` prefix;
// names, types and help texts are written once here, in the order they render.
#include "tachyon/server/metrics.h"

#include <algorithm>
#include <cstdlib>

#include "tachyon/server/metrics_text.h"

namespace tachyon::server {

namespace {

bool per_request_from_env() {
  const char* value = std::getenv("TACHYON_METRICS_PER_REQUEST");
  return value != nullptr && std::string_view(value) == "1";
}

// Index into request_success_, or -1 for a reason that is not a finish (kNone).
int finish_reason_slot(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop: return 0;
    case engine::FinishReason::kLength: return 1;
    case engine::FinishReason::kAbort: return 2;
    case engine::FinishReason::kNone: return -1;
  }
  return -1;
}

constexpr engine::FinishReason kFinishReasons[] = {engine::FinishReason::kStop, engine::FinishReason::kLength,
                                                   engine::FinishReason::kAbort};

}  // namespace

ServerMetrics::ServerMetrics(std::string model_name, std::optional<bool> per_request)
    : model_label_("model_name=\"" + escape_label_value(model_name) + "\""),
      per_request_(per_request.has_value() ? *per_request : per_request_from_env()) {}

void ServerMetrics::on_request_finished(engine::FinishReason reason) {
  int slot = finish_reason_slot(reason);
  if (slot >= 0) request_success_[slot].fetch_add(1, std::memory_order_relaxed);
}

void ServerMetrics::on_prompt_tokens(int64_t n) {
  if (n > 0) prompt_tokens_.fetch_add(n, std::memory_order_relaxed);
}

void ServerMetrics::on_generation_tokens(int64_t n) {
  if (n > 0) generation_tokens_.fetch_add(n, std::memory_order_relaxed);
}

void ServerMetrics::request_started(std::string_view request_id) {
  if (!per_request_) return;
  std::lock_guard lock(per_request_mutex_);
  context_tokens_.insert_or_assign(std::string(request_id), 0);
}

void ServerMetrics::request_context_tokens(std::string_view request_id, int64_t tokens) {
  if (!per_request_) return;
  std::lock_guard lock(per_request_mutex_);
  auto it = context_tokens_.find(request_id);
  if (it != context_tokens_.end()) it->second = tokens;
}

void ServerMetrics::request_ended(std::string_view request_id) {
  if (!per_request_) return;
  std::lock_guard lock(per_request_mutex_);
  auto it = context_tokens_.find(request_id);
  if (it != context_tokens_.end()) context_tokens_.erase(it);
}

std::string ServerMetrics::render(const engine::EngineStats& engine) const {
  std::string out;
  out.reserve(16 * 1024);
  render_counters(out, engine);
  render_histograms(out);
  render_per_request(out);
  if (role_series_) role_series_(out);
  return out;
}

void ServerMetrics::render_counters(std::string& out, const engine::EngineStats& engine) const {
  const std::string& m = model_label_;
  append_family(out, "tachyon:num_requests_running", "gauge", "Sequences running in the engine (a request with n > 1 counts n).");
  append_sample(out, "tachyon:num_requests_running", m, engine.num_running);
  append_family(out, "tachyon:num_requests_waiting", "gauge", "Sequences waiting to be scheduled (a request with n > 1 counts n).");
  append_sample(out, "tachyon:num_requests_waiting", m, engine.num_waiting);
  double usage = engine.kv_blocks_total > 0
                     ? 1.0 - static_cast<double>(engine.kv_blocks_free) / static_cast<double>(engine.kv_blocks_total)
                     : 0.0;
  append_family(out, "tachyon:kv_cache_usage_perc", "gauge", "KV-cache usage: 1 means all blocks in use (0..1).");
  append_sample(out, "tachyon:kv_cache_usage_perc", m, usage);
  append_family(out, "tachyon:engine_failed", "gauge",
                "1 once a step of the engine threw: every request failed, new ones get 503 (see /health).");
  append_sample(out, "tachyon:engine_failed", m, static_cast<int64_t>(engine.failed ? 1 : 0));

  append_family(out, "tachyon:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.");
  append_sample(out, "tachyon:prefix_cache_queries_total", m, engine.kv.prefix_queries_tokens);
  append_family(out, "tachyon:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.");
  append_sample(out, "tachyon:prefix_cache_hits_total", m, engine.kv.prefix_hit_tokens);
  append_family(out, "tachyon:num_preemptions_total", "counter", "Sequences preempted (recomputed later) for lack of KV blocks.");
  append_sample(out, "tachyon:num_preemptions_total", m, engine.preemptions);
  render_spec_decode(out, engine);

  append_family(out, "tachyon:prompt_tokens_total", "counter", "Prompt tokens of requests served.");
  append_sample(out, "tachyon:prompt_tokens_total", m, prompt_tokens_.load(std::memory_order_relaxed));
  append_family(out, "tachyon:generation_tokens_total", "counter", "Generated (output) tokens of requests served.");
  append_sample(out, "tachyon:generation_tokens_total", m, generation_tokens_.load(std::memory_order_relaxed));

  append_family(out, "tachyon:request_success_total", "counter", "Finished requests by finish reason.");
  for (engine::FinishReason reason : kFinishReasons) {
    std::string labels = m + ",finished_reason=\"" + engine::finish_reason_name(reason) + "\"";
    append_sample(out, "tachyon:request_success_total", labels,
                  request_success_[finish_reason_slot(reason)].load(std::memory_order_relaxed));
  }
}

// vLLM's spec_decode series. The per-position one has a series for each of the configured k
// positions (fixed at start-up, at most kMaxSpeculativeTokens), none without a drafter.
void ServerMetrics::render_spec_decode(std::string& out, const engine::EngineStats& engine) const {
  const std::string& m = model_label_;
  append_family(out, "tachyon:spec_decode_num_drafts_total", "counter",
                "Sequence steps that carried draft tokens (speculative decoding).");
  append_sample(out, "tachyon:spec_decode_num_drafts_total", m, engine.num_drafts);
  append_family(out, "tachyon:spec_decode_num_draft_tokens_total", "counter", "Draft tokens verified by the model.");
  append_sample(out, "tachyon:spec_decode_num_draft_tokens_total", m, engine.draft_tokens);
  append_family(out, "tachyon:spec_decode_num_accepted_tokens_total", "counter",
                "Draft tokens accepted (equal to the model's own token).");
  append_sample(out, "tachyon:spec_decode_num_accepted_tokens_total", m, engine.draft_tokens_accepted);
  if (engine.num_speculative_tokens <= 0) return;
  const char* name = "tachyon:spec_decode_num_accepted_tokens_per_pos_total";
  append_family(out, name, "counter", "Draft tokens accepted at each position of a step's drafts.");
  const int32_t positions = std::min(engine.num_speculative_tokens, core::kMaxSpeculativeTokens);
  for (int32_t i = 0; i < positions; ++i) {
    append_sample(out, name, m + ",position=\"" + std::to_string(i) + "\"",
                  engine.draft_tokens_accepted_per_position[static_cast<size_t>(i)]);
  }
}

void ServerMetrics::render_histograms(std::string& out) const {
  struct Family {
    const char* name;
    const char* help;
    const Histogram& histogram;
  };
  const Family families[] = {
      {"tachyon:time_to_first_token_seconds", "Time from arrival to the first output token.", ttft_},
      {"tachyon:inter_token_latency_seconds", "Time between two consecutive output tokens of a request.",
       inter_token_latency_},
      {"tachyon:request_time_per_output_token_seconds",
       "Per request: decode time divided by the output tokens after the first.", time_per_output_token_},
      {"tachyon:e2e_request_latency_seconds", "Time from arrival to the last output token.", e2e_latency_},
      {"tachyon:request_queue_time_seconds", "Time a request waited before it was first scheduled.", queue_time_},
      {"tachyon:request_prefill_time_seconds", "Time from first scheduled to the first output token.", prefill_time_},
      {"tachyon:request_decode_time_seconds", "Time from the first to the last output token.", decode_time_},
      {"tachyon:iteration_tokens", "Tokens scheduled in one engine step (prefill and decode).", tokens_per_step_},
  };
  for (const Family& family : families) {
    append_family(out, family.name, "histogram", family.help);
    append_histogram(out, family.name, model_label_, family.histogram.snapshot());
  }
}

void ServerMetrics::render_per_request(std::string& out) const {
  if (!per_request_) return;
  const char* name = "tachyon:request_context_tokens";
  append_family(out, name, "gauge", "Context tokens (prompt + generated) of a live request; opt-in, removed when it ends.");
  std::lock_guard lock(per_request_mutex_);
  for (const auto& [request_id, tokens] : context_tokens_) {
    append_sample(out, name, model_label_ + ",request_id=\"" + escape_label_value(request_id) + "\"", tokens);
  }
}

}  // namespace tachyon::server
