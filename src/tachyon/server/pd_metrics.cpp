#include "tachyon/server/pd_metrics.h"

#include "tachyon/server/metrics_text.h"

namespace tachyon::server {
namespace {

constexpr const char* kRecomputeNames[kNumRecomputeReasons] = {"malformed_source", "pull_failed", "other_prompt",
                                                               "rows_refused"};

}  // namespace

void PdMetrics::render(std::string& out, const engine::KvLeaseStats& leases, const KvPullStats& pulls,
                       const engine::EngineStats& engine) const {
  const bool prefill = role_ == "prefill";
  const std::string direction = prefill ? "direction=\"sent\"" : "direction=\"received\"";
  append_family(out, "tachyon:kv_transfer_bytes_total", "counter", "KV bytes moved between prefill and decode servers.");
  append_sample(out, "tachyon:kv_transfer_bytes_total", direction, transfer_bytes_.load());
  append_family(out, "tachyon:kv_transfer_seconds", "histogram",
                "Time of one KV pull: export and send (prefill), or connect to the last byte (decode).");
  append_histogram(out, "tachyon:kv_transfer_seconds", direction, transfer_time_.snapshot());
  if (prefill) {
    append_metric(out, "tachyon:kv_leases_outstanding", "gauge",
                  "KV leases granted and not yet pulled, released or expired.", leases.outstanding);
    append_metric(out, "tachyon:kv_lease_blocks", "gauge",
                  "KV blocks held by leases or reserved by prompts running for one (capped by --kv-lease-max-share).",
                  leases.blocks);
    append_family(out, "tachyon:kv_leases_total", "counter", "KV leases by outcome.");
    const std::pair<const char*, int64_t> outcomes[] = {{"granted", leases.granted},   {"exported", leases.exported},
                                                        {"released", leases.released}, {"expired", leases.expired},
                                                        {"refused", leases.refused}};
    for (const auto& [name, value] : outcomes) {
      append_sample(out, "tachyon:kv_leases_total", std::string("outcome=\"") + name + "\"", value);
    }
    append_metric(out, "tachyon:kv_transfer_pulls_in_flight", "gauge", "KV pulls this server's KV port answers now.",
                  pulls.in_flight);
    append_metric(out, "tachyon:kv_transfer_pulls_peak", "gauge", "The most KV pulls answered at once since start.",
                  pulls.peak_in_flight);
    append_metric(out, "tachyon:kv_transfer_pulls_refused_total", "counter",
                  "KV pulls refused at --kv-transfer-max-pulls (the decode server computed the prompt).",
                  pulls.refused);
    append_metric(out, "tachyon:kv_transfer_faults_sent_total", "counter",
                  "KV streams whose TACHYON_KV_TRANSFER_FAULT frame has gone out (fault-injection tests; else 0).",
                  pulls.faults_sent);
    append_metric(out, "tachyon:kv_transfer_early_tokens_total", "counter",
                  "Prompt token rows handed to a KV pull before their prompt had finished (streamed as written).",
                  leases.early_tokens);
    append_metric(out, "tachyon:kv_reference_holds", "gauge",
                  "KV streams taken by reference whose blocks stay pinned until the decode side's copy is done.",
                  leases.held_for_copy);
    append_metric(out, "tachyon:kv_reference_copies_confirmed_total", "counter",
                  "KV streams a decode server copied by reference (CUDA IPC) while their blocks were held.",
                  leases.copies_confirmed);
    return;
  }
  append_metric(out, "tachyon:kv_transfer_imports_total", "counter", "Requests that decoded from pulled KV rows.",
                imports_.load());
  append_metric(out, "tachyon:kv_reference_imports_total", "counter",
                "Imports whose rows were copied by reference out of the prefill server's cache (CUDA IPC on one "
                "GPU, or UCX reads).",
                engine.kv_reference_imports);
  append_metric(out, "tachyon:kv_reference_bytes_total", "counter", "KV bytes those imports copied.",
                engine.kv_reference_bytes);
  append_metric(out, "tachyon:kv_reference_copy_seconds_total", "counter",
                "Time those copies took, with the prefill server's confirmation (on the copier thread).",
                engine.kv_reference_copy_seconds);
  append_metric(out, "tachyon:kv_reference_unconfirmed_total", "counter",
                "By-reference imports whose copy failed or went unconfirmed (the prompt was computed here).",
                engine.kv_reference_unconfirmed);
  append_family(out, "tachyon:kv_transfer_draft_states_total", "counter",
                "Imports that brought the prefill server's MTP module rows of the prompt, by outcome (imported: "
                "the drafter goes on from them; refused: they did not fit, drafting started at the first token).");
  append_sample(out, "tachyon:kv_transfer_draft_states_total", "outcome=\"imported\"", engine.draft_states_imported);
  append_sample(out, "tachyon:kv_transfer_draft_states_total", "outcome=\"refused\"", engine.draft_states_refused);
  append_family(out, "tachyon:kv_transfer_recomputes_total", "counter",
                "Requests with a KV source whose prompt this server computed instead, by reason.");
  for (int i = 0; i < kNumRecomputeReasons; ++i) {
    append_sample(out, "tachyon:kv_transfer_recomputes_total", std::string("reason=\"") + kRecomputeNames[i] + "\"",
                  recomputes_[i].load());
  }
}

}  // namespace tachyon::server
