// The loopback/TCP transport of prefill/decode disaggregation: streams one request's prompt KV
// (engine/kv_transfer.h) from a prefill server to a decode server over plain POSIX sockets, as
// the prefill engine writes it. The decode side pulls: it connects to the prefill server's KV port
// and asks for a lease by {epoch, request id}, usually while the prompt still runs; the prefill
// side answers with a sequence of frames
//   "TKV1" u32 | status u32 | body_len u64 | body | xxh3_64(body) u64
// status 2, a chunk: begin u64, num_tokens u64, values_per_token i64, rows f32[] (the rows of
//           the prompt's tokens [begin, begin + num_tokens), sent as soon as the engine staged them);
// status 4, a heartbeat (empty body, while the prompt runs and no rows are ready);
// status 3, the commit that ends it: prompt_len u64, prompt i32[], first_token i32, seed u64,
//           values_per_token i64, num_chunks u64, chunks_xxh3 u64 (xxh3_64 over the chunks'
//           body checksums, in order), draft_state_len u64, draft_state (the prefill engine's
//           drafter's state of the prompt, engine/drafter.h; empty without MTP); taking it takes
//           the lease;
// status 1, an error message that ends it (no such lease, aborted prompt, past the bound).
// By reference (CUDA IPC on one GPU, runner/model_runner.h KvRowAccess::copy_by_reference), the
// pull names its cache's fingerprint (op 3, its xxh3 after the key); a prefill server whose cache
// has the same fingerprint answers with
// status 6, first: the source cache's block size u64 and descriptor (what the decode side maps);
// status 7 instead of 2: begin u64, num_tokens u64, num_blocks u64, blocks i32[] (where the rows lie);
// then the commit, and the stream's blocks stay pinned after it: the decode side copies the rows
// out and sends "TKVC" u32 | copied u32; the prefill server unpins them and, when it still held
// them and the copy happened, answers status 8 (confirmed, empty body). No status 8, no use of
// the copy: the decode side computes the prompt. Any other pull is answered with rows.
// (Little-endian host order: both ends are the same build.) fetch_kv() returns a payload only
// when the commit arrived and the chunks it names all arrived intact, in order, covering the
// prompt, each frame within the idle deadline of the one before; anything else is a
// KvTransferError, and the caller recomputes the prompt instead. Nothing is written into the
// decode side's cache before the commit, so a broken transfer costs time, never a wrong answer.
// Tests: tests/unit/test_kv_transport.cpp (faults mid-stream, rows sent before the prompt ends).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "tachyon/engine/kv_transfer.h"

namespace tachyon::engine {
class EngineCore;  // engine/engine_core.h
}

namespace tachyon::server {

// Faults the serving side can inject into its next answers (tests of the decode side's fallback),
// each applied to the second rows frame of a stream (a chunk, or the commit), so mid-stream.
enum class KvTransportFault { kNone, kTruncate, kCorrupt, kStall };
// TACHYON_KV_TRANSFER_FAULT=truncate|corrupt|stall (docs/testing.md): a prefill server that
// answers every pull so, for the end-to-end fault tests; unset: none. Throws Error on another value.
KvTransportFault kv_transport_fault_from_env();

// The transfer server's pulls, for metrics and tests.
struct KvPullStats {
  int64_t in_flight = 0;       // pulls sending rows now (a pull waiting for its prompt holds none)
  int64_t peak_in_flight = 0;  // the most at once since start
  int64_t refused = 0;         // pulls refused at the bound (the decode side computed the prompt)
  int64_t faults_sent = 0;     // streams whose injected fault's frame has gone out whole (tests wait on it)
};

class KvTransferServer {
 public:
  using StreamReader = std::function<engine::KvStreamRead(engine::KvLeaseKey, size_t from, bool claim)>;
  using Releaser = std::function<void(engine::KvLeaseKey)>;
  using Observer = std::function<void(int64_t bytes, double seconds)>;  // each stream sent whole
  // Listens on host:port (0: any free port) and answers on its own thread until destroyed. One
  // thread serves every connection (non-blocking sockets under poll): a stream's frames go out
  // as the reader yields them (wake() when it has more); up to `max_pulls` pulls send rows at
  // once, and a pull that arrives past the bound is answered at once with an error frame (the
  // decode side computes the prompt itself) rather than queued behind transfers that may take
  // the whole deadline. A connection that makes no progress for `io_timeout` is closed.
  // Serving by reference (the header says how): `reader` yields chunks that name blocks and keeps
  // a taken stream's pins until `release_hold` (true when it still held them); a taken stream waits
  // at most `hold_timeout` for the decode side's word, as the engine's hold does.
  struct ByReference {
    std::string fingerprint;  // this cache's; a pull naming another gets rows
    std::string descriptor;
    int64_t block_size = 0;
    std::function<engine::KvStreamRead(engine::KvLeaseKey, size_t from, bool claim)> reader;
    std::function<bool(engine::KvLeaseKey, bool copied)> release_hold;
    std::chrono::milliseconds hold_timeout = std::chrono::seconds(30);
  };
  KvTransferServer(const std::string& host, int port, StreamReader reader, Releaser releaser,
                   std::chrono::milliseconds io_timeout = std::chrono::seconds(5), Observer observer = nullptr,
                   int max_pulls = 16, std::optional<ByReference> by_reference = std::nullopt);
  ~KvTransferServer();
  KvTransferServer(const KvTransferServer&) = delete;
  KvTransferServer& operator=(const KvTransferServer&) = delete;
  int port() const { return port_; }
  void inject_fault(KvTransportFault fault) { fault_ = fault; }
  KvPullStats pull_stats() const;  // any thread
  void wake();                     // any thread: a stream has new rows or its commit

 private:
  enum class Phase { kReading, kStreaming, kStalling, kAwaitingCopy };
  struct Connection {
    int fd = -1;
    Phase phase = Phase::kReading;
    std::string in;   // the request's bytes so far
    std::string out;  // frames to send
    size_t sent = 0;
    engine::KvLeaseKey key;
    size_t next_chunk = 0;      // the stream's next chunk to read
    bool claimed = false;
    bool ended = false;         // the last frame is in `out`: close once it is sent
    bool committed = false;     // ... and it is the commit
    bool faulted = false;       // an injected fault hit a frame
    bool stall_after = false;   // the stall fault: silence once `out` is sent
    bool fault_queued = false;  // the injected fault's frame is in `out`, not all sent yet
    bool counted = false;       // holds one of the max_pulls slots (rows queued to send)
    bool by_reference = false;  // chunks name blocks (a pull of the same fingerprint)
    bool descriptor_sent = false;
    bool holding = false;       // kAwaitingCopy: the engine holds the stream's blocks for it
    int data_frames = 0;        // chunk and commit frames so far (the fault hits the second)
    int64_t payload_bytes = 0;  // chunk and commit bodies, for the observer
    std::string chunk_sums;     // the chunks' body checksums, in order
    std::chrono::steady_clock::time_point start;
    std::chrono::steady_clock::time_point deadline;   // no progress until then: closed
    std::chrono::steady_clock::time_point last_frame;  // a heartbeat follows after a quiet while
  };
  void serve();
  bool read_request(Connection& c);  // these three: true when the connection is done
  bool advance_stream(Connection& c);
  bool write_frames(Connection& c);
  bool read_copy_word(Connection& c);  // kAwaitingCopy
  void append_frame(Connection& c, uint32_t status, std::string body);
  void close_connection(Connection& c);
  void hold_slot(Connection& c, bool hold);

  StreamReader reader_;
  Releaser releaser_;
  Observer observer_;
  std::chrono::milliseconds io_timeout_;
  const int max_pulls_;
  std::optional<ByReference> by_reference_;
  uint64_t fingerprint_hash_ = 0;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: wake() makes the serving thread's poll return
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<KvTransportFault> fault_{KvTransportFault::kNone};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> peak_in_flight_{0};
  std::atomic<int64_t> faults_sent_{0};
  std::atomic<int64_t> refused_{0};
  std::thread thread_;
};

// What a prefill engine serves by reference (KvTransferServer::ByReference): its cache's
// fingerprint, descriptor and block size, its streams read by reference, its holds released; null
// when no other process can map its cache (the CPU runner). `hold_timeout`: the lease timeout.
std::optional<KvTransferServer::ByReference> by_reference_source(engine::EngineCore& engine,
                                                                 std::chrono::milliseconds hold_timeout);

// Pulls a lease's stream: returns its prompt, first token, seed and chunks (payload.rows empty;
// submit_imported joins them) once the commit arrived; throws engine::KvTransferError on any
// failure (unreachable, refused, a frame cut short, corrupted or out of order, nothing for
// `idle_timeout`, no commit within `total_timeout`, no such lease, or `cancel` raised: a
// stopping server's pull ends within 100 ms).
// With `reference_fingerprint` (this side's cache's; "" for rows), a source of the same
// fingerprint answers by reference: the payload names the source's blocks, and its confirm()
// tells the source the copy is done and returns whether it confirmed (within `idle_timeout`, and
// at most a second: the decode engine's copier thread waits for it, one import after another);
// the connection stays open until then, or until the payload is destroyed.
engine::KvPayload fetch_kv(const std::string& host, int port, engine::KvLeaseKey key,
                           std::chrono::milliseconds idle_timeout,
                           std::chrono::milliseconds total_timeout = std::chrono::minutes(2),
                           const std::atomic<bool>* cancel = nullptr, const std::string& reference_fingerprint = "");
// Asks the prefill server to drop a lease (a client that left before its KV moved). Best effort.
void release_kv_remote(const std::string& host, int port, engine::KvLeaseKey key, std::chrono::milliseconds timeout);

// The frame bodies, apart so that their checks are testable without sockets.
std::string encode_kv_chunk(const engine::KvChunk& chunk, int64_t values_per_token);
engine::KvChunk decode_kv_chunk(const std::string& body, int64_t& values_per_token);  // throws KvTransferError
std::string encode_kv_commit(const engine::KvCommit& commit, uint64_t chunks_checksum);
engine::KvCommit decode_kv_commit(const std::string& body, uint64_t& chunks_checksum);  // throws KvTransferError
std::string encode_kv_block_chunk(const engine::KvChunk& chunk);
engine::KvChunk decode_kv_block_chunk(const std::string& body);  // throws KvTransferError
// The chunk and commit body bytes of a payload fetch_kv() returned (what the sender counted).
int64_t kv_payload_bytes(const engine::KvPayload& payload);

}  // namespace tachyon::server
