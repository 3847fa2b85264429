// Prefill/decode disaggregation at the engine level. A prefill-role engine runs a request's
// prompt and samples its first token (submit_prefill), then keeps the prompt's KV blocks under a
// lease: an extra reference on each block (so neither the sequence finishing nor eviction can
// reuse them), named by the engine's epoch (a random number drawn at construction, so a lease of
// a restarted server can never be mistaken for one of the old process) and the request id, and
// dropped when exported, released, or after its timeout. A decode-role engine admits the
// request with the exported rows (submit_imported): it allocates blocks, writes the rows, marks
// the prompt computed and continues from the first token exactly as if it had run the prompt.
// KvPayload is what moves between the two; server/pd_transport.h carries it between processes.
// Test: tests/unit/test_kv_transfer.cpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tachyon/base/check.h"

namespace tachyon::runner {
class KvRowAccess;  // runner/model_runner.h
}

namespace tachyon::engine {

// A lease is unknown (never granted, already taken, timed out, or of another epoch), or a payload
// does not fit this engine: the caller recomputes the prompt instead.
class KvTransferError : public Error {
 public:
  using Error::Error;
};

// One request's prompt KV and what the prefill engine sampled from it.
struct KvPayload {
  std::vector<int32_t> prompt;   // [num_prompt_tokens] the tokens whose rows these are
  int32_t first_token = -1;      // sampled from the prompt's last row
  uint64_t seed = 0;             // the seed the prefill engine sampled with (the decode side goes on with it)
  int64_t values_per_token = 0;  // the row width over every cache plane (runner/kv_export.h)
  std::vector<float> rows;       // [planes][num_prompt_tokens][width] f32
};

struct KvLeaseKey {
  uint64_t epoch = 0;
  int64_t request_id = 0;
};

// The leases of one engine. The engine thread grants leases and frees the blocks of released or
// expired ones; any thread exports or releases. Exports copy the rows under the mutex, so the
// engine cannot free a lease's blocks while they are being read; leased blocks are never written
// (they are full of computed tokens no step recomputes), so no step races the copy.
class KvLeases {
 public:
  explicit KvLeases(std::chrono::milliseconds timeout = std::chrono::seconds(30));
  uint64_t epoch() const { return epoch_; }
  void set_timeout(std::chrono::milliseconds timeout);

  // Engine thread: a request admitted by submit_prefill; forget() when it leaves the engine.
  void expect(int64_t request_id);
  bool expected(int64_t request_id) const { return !expected_.empty() && expected_.count(request_id) > 0; }
  void forget(int64_t request_id) { expected_.erase(request_id); }
  // Engine thread: the request's prompt ran; `blocks` carry a reference that is now the lease's.
  void grant(int64_t request_id, std::vector<int32_t> blocks, std::vector<int32_t> prompt, int32_t first_token,
             uint64_t seed);
  // Engine thread: block tables whose references the caller must drop (released or expired).
  std::vector<std::vector<int32_t>> take_released(std::chrono::steady_clock::time_point now);

  // Any thread. Copies the lease's rows and releases it; throws KvTransferError when there is no
  // such lease (never granted, already exported or released, expired, another epoch).
  KvPayload export_rows(KvLeaseKey key, const runner::KvRowAccess& rows);
  void release(KvLeaseKey key);  // unknown keys are ignored
  int64_t num_leases();

 private:
  struct Lease {
    std::vector<int32_t> blocks;
    std::vector<int32_t> prompt;
    int32_t first_token = -1;
    uint64_t seed = 0;
    std::chrono::steady_clock::time_point deadline;
  };

  const uint64_t epoch_;
  std::unordered_set<int64_t> expected_;  // engine thread only
  std::mutex mutex_;
  std::chrono::milliseconds timeout_;
  std::unordered_map<int64_t, Lease> leases_;
  std::vector<std::vector<int32_t>> released_;  // blocks to free on the engine thread
};

}  // namespace tachyon::engine
