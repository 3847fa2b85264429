// Prefill/decode disaggregation at the engine level. A prefill-role engine runs a request's
// prompt and samples its first token (submit_prefill), then keeps the prompt's KV blocks under a
// lease: an extra reference on each block (so neither the sequence finishing nor eviction can
// reuse them), named by the engine's epoch (a random number drawn at construction, so a lease of
// a restarted server can never be mistaken for one of the old process) and the request id, and
// dropped when exported, released, or after its timeout. A decode-role engine admits the
// request with the exported rows (submit_imported): it allocates blocks, writes the rows, marks
// the prompt computed and continues from the first token exactly as if it had run the prompt.
// KvPayload is what moves between the two; server/pd_transport.h carries it between processes.
// Leased blocks are capped (set_max_blocks): a prefill whose prompt would take the blocks leased
// or reserved past the cap is refused (KvLeasesFullError, a 503 for the client) rather than
// filling the cache with KV nobody may pull. A release that arrives before its lease is granted
// (the client left while the prompt ran) cancels the lease as it is granted.
// Streaming: while the prompt runs, the engine thread stages the blocks its last step completed
// into the lease's stream (stage(), block by block, one chunk per step), each with a reference of
// the stream's own (a pin), and a pull reads their rows out of the cache (read_stream()), also
// before the lease is granted. The grant stages the prompt's last rows and closes the stream with
// a commit record (the prompt, first token, seed, and the count of chunks and tokens); the
// reader that takes the commit takes the lease, as export_rows() does. Why pins and not copies:
// a copy held a streamed prompt's rows twice (its blocks and the copy) until the commit was
// taken: 7.8 MiB more for a 16K-token prompt of the tiny test model, 4 GiB at Llama-3.1-8B's
// shape (f32 rows). A pinned block cannot be freed, evicted or reused (the sequence may be
// preempted or aborted meanwhile), and its rows are final once staged, so reading it later reads
// what a copy would have held. The pins go back when the stream ends (take_released()).
// Test: tests/unit/test_kv_transfer.cpp, tests/unit/test_kv_transport.cpp (streaming).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
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

// The leased blocks would pass their cap: the caller should retry later (HTTP 503).
class KvLeasesFullError : public Error {
 public:
  using Error::Error;
};

// Counters of one engine's leases (prefill role), for metrics.
struct KvLeaseStats {
  int64_t outstanding = 0;      // leases granted, not yet exported, released or expired
  int64_t blocks = 0;           // blocks leased or reserved for prompts still running
  int64_t max_blocks = 0;       // the cap on `blocks`
  int64_t granted = 0;          // totals since start
  int64_t exported = 0;
  int64_t released = 0;         // given back unexported (a client that left, no decode server)
  int64_t expired = 0;
  int64_t refused = 0;          // prefills refused at the cap
  int64_t early_tokens = 0;     // token rows handed to a pull before their prompt had finished
  int64_t held_for_copy = 0;    // streams taken by reference whose blocks wait for the copy's confirmation
  int64_t copies_confirmed = 0;  // by-reference streams whose copy was confirmed
};

// Rows of prompt tokens [begin, begin + num_tokens): [planes][num_tokens][width] f32; or, by
// reference, the source cache's blocks that hold them (the first holds token `begin`).
struct KvChunk {
  int64_t begin = 0;
  int64_t num_tokens = 0;
  std::vector<float> rows;
  std::vector<int32_t> blocks;  // by reference only
};

// One request's prompt KV and what the prefill engine sampled from it.
struct KvPayload {
  std::vector<int32_t> prompt;   // [num_prompt_tokens] the tokens whose rows these are
  int32_t first_token = -1;      // sampled from the prompt's last row
  uint64_t seed = 0;             // the seed the prefill engine sampled with (the decode side goes on with it)
  int64_t cached_tokens = 0;     // prompt tokens the prefill engine's prefix cache served (its usage)
  std::string draft_state;       // the prefill engine's drafter's state of the prompt (drafter.h); empty: none
  int64_t values_per_token = 0;  // the row width over every cache plane (runner/kv_export.h)
  std::vector<float> rows;       // [planes][num_prompt_tokens][width] f32
  // Or, with `rows` empty, the rows as a stream brought them: chunks in order from token 0
  // (submit_imported joins them with its cache's plane widths).
  std::vector<std::shared_ptr<const KvChunk>> chunks;
  // Or by reference (runner/model_runner.h KvRowAccess::copy_by_reference): `reference` is the
  // source cache's descriptor, the chunks name its blocks, and the source holds them until
  // confirm() (called once the rows are copied) returns, true when the source still held them
  // when it heard of the copy; false means the copy may have read reused blocks and must not be
  // used. Destroying the payload unconfirmed lets the source free them.
  std::string reference;
  int64_t reference_block_size = 0;  // the source cache's
  std::function<bool()> confirm;
  bool by_reference() const { return !reference.empty(); }
};

// The source blocks of a by-reference payload's chunks, one table from token 0 (`block_size`:
// the source cache's); KvTransferError when the chunks do not cover its prompt in order.
std::vector<int32_t> join_kv_block_chunks(const KvPayload& payload, int64_t block_size);

// `payload`'s chunks joined into its rows; KvTransferError when they do not cover its prompt in
// order or do not fit `plane_widths`.
void join_kv_chunks(KvPayload& payload, const std::vector<int64_t>& plane_widths);

// What closes a lease's stream: every chunk before it, whole, makes the prompt's rows.
struct KvCommit {
  std::vector<int32_t> prompt;
  int32_t first_token = -1;
  uint64_t seed = 0;
  int64_t cached_tokens = 0;
  std::string draft_state;
  int64_t values_per_token = 0;
  int64_t num_chunks = 0;
};

// The chunks of a stream from a given index on, and its commit once every chunk is out.
struct KvStreamRead {
  std::vector<std::shared_ptr<const KvChunk>> chunks;
  std::optional<KvCommit> commit;
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

  void set_max_blocks(int64_t max_blocks);  // default: no cap

  // Any thread, before a prefill is submitted: counts its prompt's blocks against the cap;
  // throws KvLeasesFullError when they would pass it (unless nothing else is held, so that a
  // prompt larger than the cap still runs). unreserve() undoes it when the submission fails.
  void reserve(int64_t num_blocks);
  void unreserve(int64_t num_blocks);
  // Any thread: a request submit_prefill queued, with its reservation (before the engine can
  // see it). Engine thread: forget() when it leaves the engine (a reservation never granted is
  // dropped).
  void expect(int64_t request_id, int64_t num_blocks);
  bool expected(int64_t request_id);
  void forget(int64_t request_id);
  // Engine thread: the request's prompt ran; `blocks` carry a reference that is now the lease's
  // (or go straight back when the lease was released before it was granted). `cached_tokens` (the
  // prompt tokens its prefix cache served) and `draft_state` travel with the rows (KvPayload).
  void grant(int64_t request_id, std::vector<int32_t> blocks, std::vector<int32_t> prompt, int32_t first_token,
             uint64_t seed, int64_t cached_tokens = 0, std::string draft_state = {});
  // Engine thread: block tables whose references the caller must drop (released or expired).
  std::vector<std::vector<int32_t>> take_released(std::chrono::steady_clock::time_point now);

  // Any thread. Copies the lease's rows and releases it; throws KvTransferError when there is no
  // such lease (never granted, already exported or released, expired, another epoch).
  KvPayload export_rows(KvLeaseKey key, const runner::KvRowAccess& rows);
  void release(KvLeaseKey key);  // unknown keys are ignored

  // Engine thread: the rows [begin, begin + num_tokens) of an expected request's prompt are
  // final (begin == staged_tokens(id), on a block boundary). `blocks` hold them, from the one
  // holding token `begin` on, each with a reference the caller took for the stream: the stream
  // gives it back (take_released) when it ends, or at once for a request no longer expected.
  int64_t staged_tokens(int64_t request_id);
  void stage(int64_t request_id, int64_t begin, int64_t num_tokens, std::vector<int32_t> blocks);
  // Any thread. The chunks of the lease's stream from index `from` on, their rows read out of
  // the pinned blocks through `rows` (under the mutex: no pin goes back during the read), and the
  // commit once the lease is granted and every chunk went out (which takes the lease). The first
  // read claims the stream (`claim`); a second claim, or a key that names no lease or running
  // prefill (never granted, taken, released, expired, aborted, another epoch) throws
  // KvTransferError.
  // By reference (`by_reference`), the chunks name their pinned blocks instead of carrying rows,
  // and taking the commit keeps the pins (the reader copies the rows out of the cache itself)
  // until release_hold(key), or the lease timeout after the commit.
  KvStreamRead read_stream(KvLeaseKey key, size_t from, bool claim, const runner::KvRowAccess& rows,
                           bool by_reference = false);
  // Any thread: the by-reference reader of `key` is done with its blocks (`copied`: and said it
  // copied them); their pins go back. False when they were no longer held (the hold timed out, so
  // the reader's copy may have read reused blocks), or for an unknown key.
  bool release_hold(KvLeaseKey key, bool copied);
  // Called on the engine thread after each stage and grant: a transport waiting on a stream
  // wakes. Any thread; once set_listener(nullptr) returns, the old listener is never called.
  void set_listener(std::function<void()> listener);
  int64_t num_leases();
  KvLeaseStats stats();

 private:
  struct Lease {
    std::vector<int32_t> blocks;
    std::vector<int32_t> prompt;
    int32_t first_token = -1;
    uint64_t seed = 0;
    std::chrono::steady_clock::time_point deadline;
    std::string draft_state;
    int64_t cached_tokens = 0;
  };
  // Prompt rows [begin, begin + num_tokens), in the pinned `blocks`.
  struct StagedChunk {
    int64_t begin = 0;
    int64_t num_tokens = 0;
    std::vector<int32_t> blocks;
  };
  struct Stream {
    std::vector<StagedChunk> chunks;
    int64_t staged_tokens = 0;
    bool claimed = false;
  };

  void drop(std::unordered_map<int64_t, Lease>::iterator it);  // under mutex_
  void end_stream(int64_t request_id);                          // under mutex_: its pins go back
  void release_pins(Stream& stream);                            // under mutex_: to released_
  void grant_locked(int64_t request_id, std::vector<int32_t> blocks, std::vector<int32_t> prompt,
                    int32_t first_token, uint64_t seed, int64_t cached_tokens, std::string draft_state);

  const uint64_t epoch_;
  std::mutex mutex_;
  std::unordered_map<int64_t, int64_t> expected_;  // request id -> reserved blocks
  std::atomic<int64_t> num_expected_{0};           // expected_.size(): the engine's lock-free "none"
  std::chrono::milliseconds timeout_;
  std::unordered_map<int64_t, Lease> leases_;
  std::unordered_set<int64_t> cancelled_;  // expected ids released before their grant
  std::unordered_map<int64_t, Stream> streams_;  // expected or leased ids -> staged rows
  struct Hold {
    Stream stream;
    std::chrono::steady_clock::time_point deadline;
  };
  std::unordered_map<int64_t, Hold> holds_;  // taken by reference, the copy not yet confirmed
  std::mutex listener_mutex_;  // apart from mutex_: a listener never runs under it
  std::function<void()> listener_;
  void notify();
  std::vector<std::vector<int32_t>> released_;  // blocks to free on the engine thread
  KvLeaseStats stats_;
};

}  // namespace tachyon::engine
