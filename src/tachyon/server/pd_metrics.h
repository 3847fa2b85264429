// PdMetrics: the Prometheus series of a server's prefill or decode role (docs/metrics.md),
// appended to its /metrics by ServerMetrics. Counters are atomics bumped on the HTTP and KV
// transfer threads; the lease series read the engine's KvLeaseStats at render time. Labels come
// from fixed sets (DESIGN rule 2).
//   prefill: KV bytes sent and time per pull, leases outstanding and their blocks, leases by outcome,
//            pulls in flight (now and at most) and refused at --kv-transfer-max-pulls, injected faults sent
//   decode:  KV bytes received and time per pull, imports, prompts recomputed by reason
//   both, by reference (CUDA IPC): prefill, streams held for a copy and copies confirmed; decode,
//            imports copied device to device, their bytes and copy time, and copies unconfirmed
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "tachyon/engine/engine_core.h"
#include "tachyon/engine/kv_transfer.h"
#include "tachyon/server/metrics_histogram.h"
#include "tachyon/server/pd_transport.h"

namespace tachyon::server {

// Why a decode server computed a prompt that came with a KV source (X-Tachyon-Kv).
enum class RecomputeReason {
  kMalformedSource,  // the header did not parse
  kPullFailed,       // unreachable, refused (no such lease), cut short, corrupted, timed out
  kOtherPrompt,      // the rows are of another prompt
  kRowsRefused,      // the engine refused the rows (another model's shape)
};
inline constexpr int kNumRecomputeReasons = 4;

class PdMetrics {
 public:
  explicit PdMetrics(std::string role) : role_(std::move(role)) {}
  // `bytes`: the payload's encoded size (server/pd_transport.h kv_payload_bytes), on both sides.
  void on_transfer(int64_t bytes, double seconds) {
    transfer_bytes_.fetch_add(bytes);
    transfer_time_.observe(seconds);
  }
  void on_import() { imports_.fetch_add(1); }
  void on_recompute(RecomputeReason reason) { recomputes_[static_cast<int>(reason)].fetch_add(1); }
  // Appends every series; `leases` and `pulls`: the engine's and the KV port's (prefill role).
  // `engine`: its by-reference import counters (decode role).
  void render(std::string& out, const engine::KvLeaseStats& leases, const KvPullStats& pulls,
              const engine::EngineStats& engine) const;

 private:
  const std::string role_;
  std::atomic<int64_t> transfer_bytes_{0};
  Histogram transfer_time_{kTtftBuckets};
  std::atomic<int64_t> imports_{0};
  std::atomic<int64_t> recomputes_[kNumRecomputeReasons] = {};
};

}  // namespace tachyon::server
