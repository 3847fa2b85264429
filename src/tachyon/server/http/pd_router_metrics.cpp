#include "tachyon/server/http/pd_router_metrics.h"

#include "tachyon/server/metrics_text.h"

namespace tachyon::server {
namespace {

constexpr const char* kOutcomeNames[kNumRouteOutcomes] = {"ok", "client_error", "unavailable", "upstream_failed",
                                                          "client_gone"};

void render_group(std::string& out, const char* role, const BackendGroup& group, const char* name,
                  int64_t (*value)(const Backend&)) {
  for (const auto& backend : group.backends()) {
    const std::string labels = std::string("role=\"") + role + "\",server=\"" + escape_label_value(backend->url) + "\"";
    append_sample(out, name, labels, value(*backend));
  }
}

}  // namespace

std::string RouterMetrics::render(const BackendGroup& prefill, const BackendGroup& decode,
                                  const RouterGauges& router) const {
  std::string out;
  out.reserve(8 * 1024);
  append_family(out, "tachyon:router_requests_total", "counter", "Requests the router answered, by outcome.");
  for (int i = 0; i < kNumRouteOutcomes; ++i) {
    append_sample(out, "tachyon:router_requests_total", std::string("outcome=\"") + kOutcomeNames[i] + "\"",
                  outcomes_[i].load());
  }
  append_metric(out, "tachyon:router_requests_in_flight", "gauge",
                "Requests the router has open (an exchange, then its relayed answer); --max-in-flight bounds them.",
                router.requests_in_flight);
  append_metric(out, "tachyon:router_relay_buffered_bytes", "gauge",
                "Answer bytes read from upstream servers that their clients' connections have not taken yet.",
                router.relay_held_bytes);
  append_metric(out, "tachyon:router_relays_paused", "gauge",
                "Relays holding their bound of an answer their client has not taken: their upstream read waits.",
                router.relays_paused);
  append_family(out, "tachyon:router_retries_total", "counter",
                "Requests sent again to another server after one failed before answering (or was at its cap).");
  append_sample(out, "tachyon:router_retries_total", "role=\"prefill\"", prefill_retries_.load());
  append_sample(out, "tachyon:router_retries_total", "role=\"decode\"", decode_retries_.load());
  append_family(out, "tachyon:router_upstream_latency_seconds", "histogram",
                "Prefill: the whole answer (the prompt ran); decode: until the answer's head (the KV moved).");
  append_histogram(out, "tachyon:router_upstream_latency_seconds", "role=\"prefill\"", prefill_latency_.snapshot());
  append_histogram(out, "tachyon:router_upstream_latency_seconds", "role=\"decode\"", decode_latency_.snapshot());

  struct Gauge {
    const char* name;
    const char* help;
    int64_t (*value)(const Backend&);
  };
  const Gauge gauges[] = {
      {"tachyon:router_upstream_healthy", "1 when the server passed its last health check and has not failed since.",
       [](const Backend& b) -> int64_t { return b.healthy ? 1 : 0; }},
      {"tachyon:router_upstream_in_flight", "Requests the router has open on the server.",
       [](const Backend& b) -> int64_t { return b.in_flight.load(); }},
      {"tachyon:router_upstream_load", "Running + waiting sequences on the server at the last scrape.",
       [](const Backend& b) -> int64_t { return b.load.load(); }},
      {"tachyon:router_upstream_prefix_blocks", "Prefix-cache blocks the server published at the last scrape.",
       [](const Backend& b) -> int64_t { return b.num_prefix_blocks.load(); }},
  };
  for (const Gauge& gauge : gauges) {
    append_family(out, gauge.name, "gauge", gauge.help);
    render_group(out, "prefill", prefill, gauge.name, gauge.value);
    render_group(out, "decode", decode, gauge.name, gauge.value);
  }
  return out;
}

}  // namespace tachyon::server
