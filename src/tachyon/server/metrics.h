// ServerMetrics: the Prometheus series of one served model, rendered for GET /metrics.
// Rule 2 of DESIGN.md (bounded metrics): every label value comes from a fixed set (the model
// name, the finish reason), every series exists from construction on, and render() reads
// atomics plus the engine's published EngineStats snapshot. So the render cost and the output's
// line count never grow with the number of requests served. The one exception is opt-in
// (TACHYON_METRICS_PER_REQUEST=1): a gauge per *live* request, removed when it ends.
// The request-path calls are O(1), lock-free and allocation-free; render() may run on any
// thread, never the engine thread. Every series is listed in docs/metrics.md.
// Test: ctest --test-dir build -R metrics (tests/unit/test_metrics.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "tachyon/engine/engine_core.h"
#include "tachyon/engine/sequence.h"
#include "tachyon/server/metrics_histogram.h"

namespace tachyon::server {

class ServerMetrics {
 public:
  // per_request: the opt-in per-request gauges; when not given, the environment variable
  // TACHYON_METRICS_PER_REQUEST=1 turns them on (read here, once).
  explicit ServerMetrics(std::string model_name, std::optional<bool> per_request = std::nullopt);
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // Request path, any thread: O(1), lock-free, no allocation.
  void on_request_finished(engine::FinishReason reason);  // kNone is ignored
  void on_prompt_tokens(int64_t n);                       // n <= 0 is ignored (counters only rise)
  void on_generation_tokens(int64_t n);
  void observe_ttft(double seconds) { ttft_.observe(seconds); }
  void observe_inter_token_latency(double seconds) { inter_token_latency_.observe(seconds); }
  void observe_time_per_output_token(double seconds) { time_per_output_token_.observe(seconds); }
  void observe_e2e_latency(double seconds) { e2e_latency_.observe(seconds); }
  void observe_queue_time(double seconds) { queue_time_.observe(seconds); }
  void observe_prefill_time(double seconds) { prefill_time_.observe(seconds); }
  void observe_decode_time(double seconds) { decode_time_.observe(seconds); }
  void observe_tokens_per_step(double tokens) { tokens_per_step_.observe(tokens); }

  // Opt-in per-request gauge tachyon:request_context_tokens{model_name, request_id}. All three
  // are no-ops when disabled. Every request_started() must be matched by a request_ended() on
  // every path (finish, abort, disconnect, error), or its series stays. An update for an id
  // that was never started, or already ended, is ignored so a late update cannot revive it.
  bool per_request_enabled() const { return per_request_; }
  void request_started(std::string_view request_id);
  void request_context_tokens(std::string_view request_id, int64_t tokens);
  void request_ended(std::string_view request_id);

  // The whole exposition text (format 0.0.4). Gauges and the prefix-cache and preemption
  // counters come from `engine`, the snapshot EngineCore::stats() published.
  std::string render(const engine::EngineStats& engine) const;
  // Series of a server role (server/pd_metrics.h), appended by render(). Set before serving.
  void set_role_series(std::function<void(std::string&)> render) { role_series_ = std::move(render); }

 private:
  static constexpr int kNumFinishReasons = 3;  // stop, length, abort

  void render_counters(std::string& out, const engine::EngineStats& engine) const;
  void render_spec_decode(std::string& out, const engine::EngineStats& engine) const;
  void render_histograms(std::string& out) const;
  void render_per_request(std::string& out) const;

  const std::string model_label_;  // `model_name="<escaped>"`, built once
  const bool per_request_;

  std::atomic<int64_t> request_success_[kNumFinishReasons] = {};
  std::atomic<int64_t> prompt_tokens_{0};
  std::atomic<int64_t> generation_tokens_{0};

  Histogram ttft_{kTtftBuckets};
  Histogram inter_token_latency_{kTokenLatencyBuckets};
  Histogram time_per_output_token_{kTokenLatencyBuckets};
  Histogram e2e_latency_{kRequestLatencyBuckets};
  Histogram queue_time_{kRequestLatencyBuckets};
  Histogram prefill_time_{kRequestLatencyBuckets};
  Histogram decode_time_{kRequestLatencyBuckets};
  Histogram tokens_per_step_{kStepTokensBuckets};

  // Live requests only (opt-in): request id -> context tokens. Sorted, so renders are stable.
  mutable std::mutex per_request_mutex_;
  std::map<std::string, int64_t, std::less<>> context_tokens_;
  std::function<void(std::string&)> role_series_;
};

}  // namespace tachyon::server
