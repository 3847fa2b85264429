// The router's own Prometheus series (GET /metrics of `tachyon router`, docs/metrics.md):
// requests by outcome, retries, upstream latency by role, and per upstream server its health,
// open requests, scraped load and published prefix blocks. Bounded (DESIGN rule 2): the
// outcome and role labels come from fixed sets, the server labels from the command line.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "tachyon/server/http/pd_backends.h"
#include "tachyon/server/metrics_histogram.h"

namespace tachyon::server {

enum class RouteOutcome {
  kOk,              // the decode server's answer went out whole
  kClientError,     // a 4xx from a server, relayed
  kUnavailable,     // 503 from the router: no server could take it (down, or at its cap)
  kUpstreamFailed,  // the decode server failed after the answer began (an error event or body)
  kClientGone,      // the client hung up before the end; both servers' KV freed
};
inline constexpr int kNumRouteOutcomes = 5;

// The router's own gauges, read as /metrics renders.
struct RouterGauges {
  int64_t requests_in_flight = 0;  // holding a --max-in-flight slot: an exchange, then its relay
  int64_t relay_held_bytes = 0;    // answer bytes read from servers, not yet taken by a client's connection
  int64_t relays_paused = 0;       // relays at their bound: their read waits for the client to take
};

class RouterMetrics {
 public:
  void on_outcome(RouteOutcome outcome) { outcomes_[static_cast<int>(outcome)].fetch_add(1); }
  void on_retry(bool prefill) { (prefill ? prefill_retries_ : decode_retries_).fetch_add(1); }
  void observe_prefill(double seconds) { prefill_latency_.observe(seconds); }      // whole answer
  void observe_decode_head(double seconds) { decode_latency_.observe(seconds); }   // to the answer's head
  std::string render(const BackendGroup& prefill, const BackendGroup& decode, const RouterGauges& gauges) const;

 private:
  std::atomic<int64_t> outcomes_[kNumRouteOutcomes] = {};
  std::atomic<int64_t> prefill_retries_{0};
  std::atomic<int64_t> decode_retries_{0};
  Histogram prefill_latency_{kRequestLatencyBuckets};
  Histogram decode_latency_{kRequestLatencyBuckets};
};

}  // namespace tachyon::server
