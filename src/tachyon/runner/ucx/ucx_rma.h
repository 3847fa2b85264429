// UcxRma: one-sided reads of another process's memory through UCX (Debian's libucx), the
// transport prefill/decode disaggregation uses across nodes (runner/ucx/ucx_kv_rows.h). The
// exposing side registers regions and publishes its worker's address and each region's packed
// remote key; the reading side connects to that address and posts GETs straight into its own
// memory. On InfiniBand or RoCE a GET is an RDMA read the exposing process's CPU never sees; on
// TCP UCX emulates it with messages that the exposing side's progress thread answers, which is
// why exposing starts that thread. Same code either way; UCX picks the transport (UCX_TLS).
// A read has a deadline: a peer that dies or freezes fails it (UCX's peer error handling), the
// endpoint is closed by force, and read() returns only once no GET can still write into the
// caller's memory (the caller frees and reuses it).
// Test: tests/unit/test_ucx_kv_rows.cpp.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <ucp/api/ucp.h>

namespace tachyon::runner::ucx {

class UcxRma {
 public:
  UcxRma();  // throws Error when UCX cannot start (no transport, no memory)
  ~UcxRma();
  UcxRma(const UcxRma&) = delete;
  UcxRma& operator=(const UcxRma&) = delete;

  // Registers [data, data + bytes) for remote reads until this object is destroyed; returns the
  // region's packed remote key. Starts the progress thread on the first call.
  std::string expose(void* data, size_t bytes);
  const std::string& worker_address() const { return worker_address_; }

  struct Get {
    int region;              // index into the rkeys read() is given
    uint64_t remote_address;
    void* local;
    size_t bytes;
  };
  // Reads every GET from the peer at `peer_address` (its regions' keys in `rkeys`) and returns
  // once all have landed. Throws Error when the peer fails them or `timeout` passes; either way
  // nothing is in flight into the caller's memory afterwards. Connections (and unpacked keys)
  // are kept per peer for the next read and closed after a minute unused. Not thread-safe with
  // another read() (one caller: the engine thread).
  void read(const std::string& peer_address, std::span<const std::string> rkeys, std::span<const Get> gets,
            std::chrono::milliseconds timeout);

 private:
  struct Peer;
  using Peers = std::map<std::string, std::unique_ptr<Peer>>;  // by address + keys
  // The connection to `address` (made, and its keys unpacked, on first use); closes idle ones.
  Peers::iterator peer(const std::string& address, std::span<const std::string> rkeys);
  void close_peer(std::unique_ptr<Peer> peer);
  void progress_loop();

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  std::string worker_address_;
  std::mutex expose_mutex_;  // regions_ and starting the progress thread
  std::vector<ucp_mem_h> regions_;
  std::thread progress_;
  std::atomic<bool> stopping_{false};  // the progress thread's; ucp_worker_signal wakes it
  Peers peers_;
};

}  // namespace tachyon::runner::ucx
