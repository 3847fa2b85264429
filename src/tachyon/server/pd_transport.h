// The loopback/TCP transport of prefill/decode disaggregation: moves one request's KvPayload
// (engine/kv_transfer.h) from a prefill server to a decode server over plain POSIX sockets.
// The decode side pulls: it connects to the prefill server's KV port and asks for a lease by
// {epoch, request id}; the prefill side exports the rows (which releases the lease) and answers
// with one frame:
//   "TKV1" u32 | status u32 (0 payload, 1 error message) | body_len u64 | body | xxh3_64(body) u64
// The payload body is prompt_len u64, prompt i32[], first_token i32, seed u64,
// values_per_token i64, rows f32[prompt_len * values_per_token] (little-endian host order: both
// ends are the same build). fetch_kv() returns a payload only when every byte arrived within the
// deadline and the checksum and lengths agree; anything else is a KvTransferError, and the caller
// recomputes the prompt instead, so a broken transfer costs time, never a wrong answer.
// Tests: tests/unit/test_kv_transport.cpp (truncated frame, bad checksum, stalled sender).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

#include "tachyon/engine/kv_transfer.h"

namespace tachyon::server {

// Faults the serving side can inject into its next answers (tests of the decode side's fallback).
enum class KvTransportFault { kNone, kTruncate, kCorrupt, kStall };
// TACHYON_KV_TRANSFER_FAULT=truncate|corrupt|stall (docs/testing.md): a prefill server that
// answers every pull so, for the end-to-end fault tests; unset: none. Throws Error on another value.
KvTransportFault kv_transport_fault_from_env();

// The transfer server's pulls, for metrics and tests.
struct KvPullStats {
  int64_t in_flight = 0;       // pulls being answered now
  int64_t peak_in_flight = 0;  // the most at once since start
  int64_t refused = 0;         // pulls refused at the bound (the decode side computed the prompt)
};

class KvTransferServer {
 public:
  using Exporter = std::function<engine::KvPayload(engine::KvLeaseKey)>;
  using Releaser = std::function<void(engine::KvLeaseKey)>;
  using Observer = std::function<void(int64_t bytes, double seconds)>;  // each payload body sent whole
  // Listens on host:port (0: any free port) and answers on its own thread until destroyed. One
  // thread serves every connection (non-blocking sockets under poll): up to `max_pulls` pulls
  // are answered at once, each within `io_timeout` of its connection; a pull beyond the bound is
  // answered at once with an error frame (the decode side computes the prompt itself) rather
  // than queued behind transfers that may take the whole deadline.
  KvTransferServer(const std::string& host, int port, Exporter exporter, Releaser releaser,
                   std::chrono::milliseconds io_timeout = std::chrono::seconds(5), Observer observer = nullptr,
                   int max_pulls = 16);
  ~KvTransferServer();
  KvTransferServer(const KvTransferServer&) = delete;
  KvTransferServer& operator=(const KvTransferServer&) = delete;
  int port() const { return port_; }
  void inject_fault(KvTransportFault fault) { fault_ = fault; }
  KvPullStats pull_stats() const;  // any thread

 private:
  enum class Phase { kReading, kWriting, kStalling };
  struct Connection {
    int fd = -1;
    Phase phase = Phase::kReading;
    std::string in;   // the request's bytes so far
    std::string out;  // the whole frame to send
    size_t sent = 0;
    std::chrono::steady_clock::time_point start;
    std::chrono::steady_clock::time_point deadline;
    bool counted = false;      // holds one of the max_pulls slots
    bool stall_after = false;  // the stall fault: silence once `out` is sent
    int64_t payload_bytes = 0;  // the payload body's size, for the observer (0: not a whole payload)
  };
  void serve();
  bool read_request(Connection& c);  // these three: true when the connection is done
  bool write_frame(Connection& c);
  void prepare_frame(Connection& c, uint32_t status, std::string body, KvTransportFault fault);
  void close_connection(Connection& c);

  Exporter exporter_;
  Releaser releaser_;
  Observer observer_;
  std::chrono::milliseconds io_timeout_;
  const int max_pulls_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<KvTransportFault> fault_{KvTransportFault::kNone};
  std::atomic<int64_t> in_flight_{0};
  std::atomic<int64_t> peak_in_flight_{0};
  std::atomic<int64_t> refused_{0};
  std::thread thread_;
};

// Pulls a lease's rows; throws engine::KvTransferError on any failure (unreachable, refused,
// timed out, truncated, checksum or length mismatch, no such lease).
engine::KvPayload fetch_kv(const std::string& host, int port, engine::KvLeaseKey key, std::chrono::milliseconds timeout);
// Asks the prefill server to drop a lease (a client that left before its KV moved). Best effort.
void release_kv_remote(const std::string& host, int port, engine::KvLeaseKey key, std::chrono::milliseconds timeout);

// The frame codec, apart so that its checks are testable without sockets.
std::string encode_kv_payload(const engine::KvPayload& payload);
int64_t kv_payload_bytes(const engine::KvPayload& payload);  // encode_kv_payload(payload).size(), counted
engine::KvPayload decode_kv_payload(const std::string& body);  // throws KvTransferError

}  // namespace tachyon::server
