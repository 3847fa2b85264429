// UpstreamCall: one HTTP request from the router (http/pd_router.h) to a prefill or decode
// server, run on its own thread so that the router's connection stays free to notice a client
// that hangs up. The caller waits for the answer's head (status and headers), then takes the
// body as it arrives; cancel() (or destruction) closes the upstream connection at once, which is
// how a departed client's request is aborted on the server behind it (the server notices the
// closed socket and frees the request's KV). Built on cpp-httplib's blocking client.
// A call may bound the body bytes it holds for take() (a relay: http/pd_router.h): past the
// bound its read of the upstream answer waits until the caller takes them, so a client that
// reads nothing makes the router hold at most that much of its answer, not the whole of it (the
// upstream server's write then waits too, as it would for a slow client of its own; the client's
// write timeout or hang-up ends both). wait_body() lifts the bound.
// UpstreamCalls is the set of a router's open calls, so that stopping it ends them at once; it
// also counts their held bytes and paused reads for the router's /metrics.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

namespace httplib {
class Client;
}

namespace tachyon::server {

class UpstreamCall;

// The calls a router has open (each call that names it joins while it lives), so that stopping
// the router cancels them all at once instead of waiting out their upstream servers; a call
// started after cancel_all() fails as it starts.
class UpstreamCalls {
 public:
  void cancel_all();
  int64_t held_bytes() const { return held_bytes_.load(); }    // body bytes waiting for take()
  int64_t paused_reads() const { return paused_reads_.load(); }  // calls waiting for take() to read on

 private:
  friend class UpstreamCall;
  bool add(UpstreamCall* call);  // false: cancel_all() ran
  void remove(UpstreamCall* call);

  std::mutex mutex_;
  std::unordered_set<UpstreamCall*> calls_;
  bool cancelled_ = false;
  std::atomic<int64_t> held_bytes_{0};
  std::atomic<int64_t> paused_reads_{0};
};

struct UpstreamRequest {
  std::string host;
  int port = 0;
  std::string path;
  std::string body;                                          // POSTed as application/json
  std::vector<std::pair<std::string, std::string>> headers;  // extra header fields
  std::chrono::seconds read_timeout{600};
  std::string method = "POST";
  UpstreamCalls* calls = nullptr;  // the set this call joins while it lives (outlives it), or none
  // Body bytes held for take() past which the read waits for the caller to take them; 0: none.
  size_t max_held = 0;
};

class UpstreamCall {
 public:
  explicit UpstreamCall(UpstreamRequest request);  // starts the call
  ~UpstreamCall();                                 // cancels and joins
  UpstreamCall(const UpstreamCall&) = delete;
  UpstreamCall& operator=(const UpstreamCall&) = delete;

  // Blocks until the head arrives; the status, or 0 when the call failed before it (refused,
  // reset, timed out).
  int wait_head();
  std::string header(const std::string& name) const;  // after wait_head(); "" when absent
  // Blocks until the body is complete (or failed); the whole body.
  std::string wait_body();
  // Never blocks: appends the body bytes received since the last take() to `out`; true once
  // the call is over (then failed() says whether it ended early).
  bool take(std::string& out);
  bool failed() const;
  // Called (from the call's thread) when bytes arrive or the call ends; cheap, never blocks.
  void set_wakeup(std::function<void()> wakeup);
  void cancel();  // any thread

 private:
  void run(UpstreamRequest request);
  void fail_at_start();
  bool receive(const char* data, size_t size);  // the body's bytes as they arrive; false: stop
  void count_held(int64_t bytes);               // pending_ grew (or shrank) by `bytes`

  UpstreamCalls* calls_ = nullptr;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  int status_ = 0;
  bool head_ = false;
  bool done_ = false;
  bool failed_ = false;
  bool cancelled_ = false;
  bool whole_ = false;  // wait_body() runs: no bound on pending_
  size_t max_held_ = 0;
  std::vector<std::pair<std::string, std::string>> response_headers_;
  std::string pending_;
  std::function<void()> wakeup_;
  std::unique_ptr<httplib::Client> client_;
  std::thread thread_;
};

}  // namespace tachyon::server
