// HttpConnection: one client socket's HTTP/1.x state machine, on its own strand of the I/O
// context (internal to server/http/; routes never see it). A connection never holds a thread:
//   wait for a request (idle_timeout) -> read its head (header_timeout, from the first byte;
//   max_header_bytes, max_header_count) -> answer 100-continue -> read its body (body_timeout,
//   max_body_bytes however framed) -> run the route on a worker -> write the answer -> next.
// Requests pipelined behind the current one wait in the read buffer and are answered in order.
// While a body streams, the socket is also read, so a client that hangs up is noticed at once
// and its generation aborted (its body stream dropped), not only at the next failed write. So
// it is while an async route (Router::add_async) makes its answer elsewhere: no worker waits.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>  // before Asio: Boost 1.74 uses std::exchange without including it

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "tachyon/server/http/http_message.h"
#include "tachyon/server/http/http_router.h"
#include "tachyon/server/http/http_server.h"

namespace tachyon::server {

namespace net = boost::asio;
namespace beast = boost::beast;

// Lets a wakeup from the engine's thread post into the I/O context only while that context
// lives: the listener closes the gate before it destroys the context.
class WakeupGate {
 public:
  template <class Post>
  void run(Post&& post) {
    std::lock_guard lock(mutex_);
    if (open_) post();
  }
  void close() {
    std::lock_guard lock(mutex_);
    open_ = false;
  }

 private:
  std::mutex mutex_;
  bool open_ = true;
};

// What every connection of one listener shares.
struct ConnectionEnv {
  const HttpOptions& options;
  const Router& router;
  net::thread_pool& workers;
  std::shared_ptr<WakeupGate> gate = std::make_shared<WakeupGate>();
  std::atomic<size_t> open{0};
};

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(net::ip::tcp::socket socket, ConnectionEnv& env);
  ~HttpConnection();
  void start();

 private:
  using Parser = beast::http::request_parser<beast::http::string_body>;

  // Reading a request.
  void wait_for_request();
  void read_head();
  void on_head(beast::error_code ec);
  void read_body();
  void on_body(beast::error_code ec);
  void refuse_framing(beast::error_code ec);
  void arm_deadline(std::chrono::milliseconds limit);
  beast::error_code disarm_deadline(beast::error_code ec);
  void dispatch();
  void dispatch_async();
  void on_answer(HttpResponse response);

  // Writing its answer.
  void respond(HttpResponse response);
  void write_whole(const HttpResponse& response);
  void start_stream(HttpResponse response);
  void on_wakeup();
  void start_pump();
  void on_pumped(std::string bytes, bool done, std::optional<int> status);
  std::string stream_head(const HttpResponse& response, int status) const;
  void write_out();
  void arm_tick();
  void watch_peer();
  void on_watch(beast::error_code ec, size_t bytes);
  void end_response();
  void next_or_close();

  void graceful_close();
  void drain();
  void close();

  ConnectionEnv& env_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<Parser> parser_;
  // The head's and the body's deadlines. Not the stream's own expiry: that closes the socket,
  // and a client that ran out of time should still read its 408.
  net::steady_timer deadline_;
  uint64_t deadline_id_ = 0;
  bool timed_out_ = false;
  HttpRequest request_;  // the request being answered
  bool keep_alive_ = true;
  bool awaiting_ = false;                // an async route's answer is being made
  std::optional<HttpResponse> answer_;  // it came while the watching read was pending

  // The streamed body in flight, and where its pump stands.
  std::shared_ptr<BodyStream> body_;
  std::optional<HttpResponse> waiting_head_;  // a head that waits for the body (head_waits_for_body)
  std::string out_;  // bytes being written
  bool chunked_ = false;
  bool pumping_ = false;
  bool writing_ = false;
  bool wake_pending_ = false;
  bool body_done_ = false;
  net::steady_timer tick_;
  bool watching_ = false;  // a read is pending to notice a hang-up
  bool peer_gone_ = false;  // that read saw the client's half-close or reset
  bool ending_ = false;    // the body is complete; waiting for that read to be cancelled
  bool closed_ = false;
  char discard_[4096];
  size_t discarded_ = 0;
};

}  // namespace tachyon::server
