#include "tachyon/server/http/http_connection.h"

#include <cstdio>

namespace tachyon::server {

namespace http = beast::http;

namespace {

// The status line's words for the statuses we send; Beast knows them all.
std::string status_line(int version, int status) {
  const auto reason = http::obsolete_reason(static_cast<http::status>(status));
  return std::string(version == 10 ? "HTTP/1.0 " : "HTTP/1.1 ") + std::to_string(status) + " " +
         std::string(reason.data(), reason.size()) + "\r\n";
}

// A framing failure's answer, or none when the peer simply went away.
std::optional<ApiError> framing_error(beast::error_code ec) {
  if (ec == http::error::header_limit) {
    return ApiError{431, "the request head is too large", "invalid_request_error", "", "request_header_too_large"};
  }
  if (ec == http::error::body_limit) {
    return ApiError{413, "request body too large", "invalid_request_error", "", "request_body_too_large"};
  }
  if (ec == beast::error::timeout) {
    return ApiError{408, "the request did not arrive in time", "invalid_request_error", "", "request_timeout"};
  }
  if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == net::error::eof ||
      ec == net::error::operation_aborted || ec == net::error::connection_reset || ec == net::error::broken_pipe ||
      ec == net::error::bad_descriptor) {
    return std::nullopt;
  }
  return ApiError{400, "malformed HTTP request: " + ec.message(), "invalid_request_error", "", "bad_http"};
}

// A request whose body this server cannot read as sent. RFC 9112 6.3: a Transfer-Encoding that
// does not end in chunked leaves the body's length unknown (read by Content-Length, it would let a
// proxy and this server frame the stream differently): 400, then close. A Content-Encoding other
// than identity would be decoded by nothing here: 415 (RFC 9110 15.5.16).
template <class Head>
std::optional<ApiError> encoding_error(const Head& head, bool chunked) {
  if (head.find(http::field::transfer_encoding) != head.end() && !chunked) {
    return ApiError{400, "Transfer-Encoding must end in chunked; send the body with Content-Length or chunked alone",
                    "invalid_request_error", "", "bad_http"};
  }
  const auto [first, last] = head.equal_range(http::field::content_encoding);
  for (auto it = first; it != last; ++it) {
    if (!beast::iequals(it->value(), "identity")) {
      return ApiError{415,
                      "Content-Encoding '" + std::string(it->value()) + "' is not supported; send the body unencoded",
                      "invalid_request_error", "", "unsupported_media_type"};
    }
  }
  return std::nullopt;
}

}  // namespace

HttpConnection::HttpConnection(net::ip::tcp::socket socket, ConnectionEnv& env)
    : env_(env), stream_(std::move(socket)), deadline_(stream_.get_executor()), tick_(stream_.get_executor()) {
  ++env_.open;
  beast::error_code ec;
  stream_.socket().set_option(net::ip::tcp::no_delay(true), ec);  // SSE frames are small and urgent
}

HttpConnection::~HttpConnection() { --env_.open; }

void HttpConnection::start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->wait_for_request(); });
}

// Idle: no request begun. The head's deadline starts with its first byte, so a kept-alive
// connection may idle for idle_timeout while a dripping head gets only header_timeout.
void HttpConnection::wait_for_request() {
  if (buffer_.size() > 0) return read_head();
  buffer_.shrink_to_fit();  // an idle connection holds no buffer
  stream_.expires_after(env_.options.idle_timeout);
  stream_.async_read_some(buffer_.prepare(1024), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->buffer_.commit(n);
    if (ec || n == 0) return self->close();
    self->read_head();
  });
}

void HttpConnection::read_head() {
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(env_.options.max_header_bytes));
  parser_->body_limit(env_.options.max_body_bytes);
  stream_.expires_never();
  arm_deadline(env_.options.header_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_head(ec); });
}

void HttpConnection::arm_deadline(std::chrono::milliseconds limit) {
  timed_out_ = false;
  const uint64_t id = ++deadline_id_;
  deadline_.expires_after(limit);
  std::weak_ptr<HttpConnection> weak = shared_from_this();
  deadline_.async_wait([weak, id](beast::error_code ec) {
    auto self = weak.lock();
    if (ec || !self || self->deadline_id_ != id) return;  // disarmed, or an older deadline
    self->timed_out_ = true;
    beast::error_code ignored;
    self->stream_.socket().cancel(ignored);  // the pending read ends with operation_aborted
  });
}

// The read's outcome with the deadline accounted for: a read the deadline cancelled timed out.
beast::error_code HttpConnection::disarm_deadline(beast::error_code ec) {
  ++deadline_id_;
  deadline_.cancel();
  if (timed_out_ && ec == net::error::operation_aborted) return beast::error::timeout;
  return ec;
}

void HttpConnection::on_head(beast::error_code ec) {
  ec = disarm_deadline(ec);
  if (ec) return refuse_framing(ec);
  const auto& head = parser_->get();
  size_t fields = 0;
  for (auto it = head.begin(); it != head.end(); ++it) ++fields;
  std::optional<ApiError> refused;
  if (fields > env_.options.max_header_count) {
    refused = ApiError{431,
                       "too many header fields (" + std::to_string(fields) + "; the limit is " +
                           std::to_string(env_.options.max_header_count) + ")",
                       "invalid_request_error", "", "request_header_too_large"};
  } else {
    refused = encoding_error(head, parser_->chunked());
  }
  if (refused) {  // the body is left unread, so the connection cannot go on
    keep_alive_ = false;
    HttpResponse refusal = error_response(*refused);
    refusal.close = true;
    request_ = HttpRequest{};
    request_.version = head.version();
    return respond(std::move(refusal));
  }
  if (beast::iequals(head[http::field::expect], "100-continue") && !parser_->is_done()) {
    out_ = "HTTP/1.1 100 Continue\r\n\r\n";
    stream_.expires_after(env_.options.write_timeout);
    return net::async_write(stream_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->close();
      self->read_body();
    });
  }
  read_body();
}

void HttpConnection::read_body() {
  if (parser_->is_done()) return dispatch();
  stream_.expires_never();
  arm_deadline(env_.options.body_timeout);
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void HttpConnection::on_body(beast::error_code ec) {
  ec = disarm_deadline(ec);
  if (ec) return refuse_framing(ec);
  dispatch();
}

void HttpConnection::refuse_framing(beast::error_code ec) {
  std::optional<ApiError> error = framing_error(ec);
  if (!error) return close();
  HttpResponse refusal = error_response(*error);
  refusal.close = true;
  request_ = HttpRequest{};
  request_.version = parser_ && parser_->is_header_done() ? parser_->get().version() : 11;
  respond(std::move(refusal));
}

// The request is whole: copy it out of Beast's types and run its route on a worker, so that
// templates and tokenizing never stall the sockets (a route added with add_inline runs here).
void HttpConnection::dispatch() {
  auto& message = parser_->get();
  request_ = HttpRequest{};
  request_.method = std::string(message.method_string());
  const std::string_view target(message.target().data(), message.target().size());
  const size_t question = target.find('?');
  request_.path = std::string(target.substr(0, question));
  if (question != std::string_view::npos) request_.query = std::string(target.substr(question + 1));
  request_.version = message.version();
  beast::error_code ec;
  const auto remote = stream_.socket().remote_endpoint(ec);
  if (!ec) request_.peer = remote.address().to_string();
  for (const auto& field : message) {
    request_.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  request_.body = std::move(message.body());
  keep_alive_ = message.keep_alive();
  parser_.reset();
  if (env_.router.runs_inline(request_)) return respond(env_.router.dispatch(request_));  // never behind the workers
  if (env_.router.runs_async(request_)) return dispatch_async();
  net::post(env_.workers, [self = shared_from_this()] {
    HttpResponse response = self->env_.router.dispatch(self->request_);
    net::post(self->stream_.get_executor(),
              [self, response = std::move(response)]() mutable { self->respond(std::move(response)); });
  });
}

// An async route's handler starts on a worker and returns at once; its answer comes back to
// this strand whenever it is ready. Meanwhile the socket is read, so a client that hangs up is
// let go at once (its answer, when it comes, is dropped, which abandons a stream's producer). A
// timer that never fires keeps the connection alive until then; close() or the answer ends it.
void HttpConnection::dispatch_async() {
  awaiting_ = true;
  tick_.expires_at(net::steady_timer::time_point::max());
  tick_.async_wait([self = shared_from_this()](beast::error_code) {});
  watch_peer();
  std::weak_ptr<HttpConnection> weak = shared_from_this();
  Respond answer = [weak, gate = env_.gate, executor = stream_.get_executor()](HttpResponse response) {
    gate->run([&] {
      net::post(executor, [weak, response = std::move(response)]() mutable {
        if (auto self = weak.lock()) self->on_answer(std::move(response));
      });
    });
  };
  net::post(env_.workers, [self = shared_from_this(), request = request_, answer = std::move(answer)] {
    self->env_.router.dispatch(request, answer);
  });
}

void HttpConnection::on_answer(HttpResponse response) {
  if (closed_ || !awaiting_) return;
  awaiting_ = false;
  tick_.cancel();
  if (watching_) {  // one read at a time: the watching read ends first, then on_watch responds
    answer_ = std::move(response);
    beast::error_code ec;
    stream_.socket().cancel(ec);
    return;
  }
  respond(std::move(response));
}

void HttpConnection::respond(HttpResponse response) {
  if (closed_) return;
  if (response.close) keep_alive_ = false;
  if (response.stream && request_.method != "HEAD") return start_stream(std::move(response));
  write_whole(response);
}

void HttpConnection::write_whole(const HttpResponse& response) {
  auto message = std::make_shared<http::response<http::string_body>>(static_cast<http::status>(response.status),
                                                                     request_.version);
  message->set(http::field::content_type, response.content_type);
  for (const auto& [name, value] : response.headers) message->set(name, value);
  message->keep_alive(keep_alive_);
  if (request_.method == "HEAD") {
    message->content_length(response.body.size());
  } else {
    message->body() = response.body;
    message->prepare_payload();
  }
  stream_.expires_after(env_.options.write_timeout);
  http::async_write(stream_, *message, [self = shared_from_this(), message](beast::error_code ec, size_t) {
    if (ec) return self->close();
    self->next_or_close();
  });
}

// The head now (or, when it waits for the body, with the body's first bytes), the body as the
// stream produces it: chunked on HTTP/1.1; on HTTP/1.0 (no chunking there) raw bytes, ended by
// closing the connection.
void HttpConnection::start_stream(HttpResponse response) {
  body_ = std::move(response.stream);
  chunked_ = request_.version >= 11;
  if (!chunked_) keep_alive_ = false;
  body_done_ = false;
  waiting_head_.reset();
  std::string head;
  if (response.head_waits_for_body) {
    waiting_head_ = std::move(response);
  } else {
    head = stream_head(response, response.status);
  }
  std::weak_ptr<HttpConnection> weak = shared_from_this();
  body_->set_wakeup([weak, gate = env_.gate, executor = stream_.get_executor()] {
    gate->run([&] {
      net::post(executor, [weak] {
        if (auto self = weak.lock()) self->on_wakeup();
      });
    });
  });
  watch_peer();
  wake_pending_ = true;  // pump right after the head: the generation may have news already
  if (waiting_head_) return start_pump();
  out_ = std::move(head);
  write_out();
}

std::string HttpConnection::stream_head(const HttpResponse& response, int status) const {
  std::string head = status_line(request_.version, status);
  head += "Content-Type: " + response.content_type + "\r\n";
  for (const auto& [name, value] : response.headers) head += name + ": " + value + "\r\n";
  if (chunked_) head += "Transfer-Encoding: chunked\r\n";
  if (!keep_alive_) head += "Connection: close\r\n";
  return head + "\r\n";
}

void HttpConnection::on_wakeup() {
  if (closed_ || !body_) return;
  wake_pending_ = true;
  if (!pumping_ && !writing_ && !body_done_) start_pump();
}

void HttpConnection::start_pump() {
  if (closed_ || !body_) return;  // the client left while a write completed: nothing to pump
  pumping_ = true;
  wake_pending_ = false;
  net::post(env_.workers, [self = shared_from_this(), body = body_] {
    std::string bytes;
    bool done = false;
    bool failed = false;
    std::optional<int> status;
    try {
      done = body->pump(bytes);
      status = body->status();  // here, after pump(): the stream's state is this thread's now
    } catch (const std::exception& e) {  // the body is cut: end it, and the connection after it
      std::fprintf(stderr, "[tachyon] a response stream failed: %s\n", e.what());
      done = true;
      failed = true;
      status = 500;  // what a head still waiting says
    }
    net::post(self->stream_.get_executor(), [self, bytes = std::move(bytes), done, failed, status]() mutable {
      if (failed) self->keep_alive_ = false;
      self->on_pumped(std::move(bytes), done, status);
    });
  });
}

void HttpConnection::on_pumped(std::string bytes, bool done, std::optional<int> status) {
  pumping_ = false;
  if (closed_) return;
  body_done_ = done;
  out_.clear();
  if (!chunked_) {
    out_ = std::move(bytes);
  } else {
    if (!bytes.empty()) {
      char size[24];
      std::snprintf(size, sizeof(size), "%zx\r\n", bytes.size());
      out_ = size + bytes + "\r\n";
    }
    if (done) out_ += "0\r\n\r\n";
  }
  if (waiting_head_ && (!out_.empty() || done)) {  // the status is known now: the head goes first
    out_ = stream_head(*waiting_head_, status.value_or(waiting_head_->status)) + out_;
    waiting_head_.reset();
  }
  if (!out_.empty()) return write_out();
  if (done) return end_response();
  if (wake_pending_) return start_pump();
  arm_tick();
}

void HttpConnection::write_out() {
  writing_ = true;
  stream_.expires_after(env_.options.write_timeout);
  net::async_write(stream_, net::buffer(out_), [self = shared_from_this()](beast::error_code ec, size_t) {
    self->writing_ = false;
    self->out_.clear();
    // The client left or stopped reading (or the watching read saw it hang up meanwhile):
    // dropping the body aborts its generation.
    if (ec || self->closed_) return self->close();
    if (self->body_done_) return self->end_response();
    if (self->wake_pending_) return self->start_pump();
    self->arm_tick();
  });
}

// Pumps at least every keepalive_interval: a non-streamed answer writes its space then. The wait
// holds the connection: while the pump is idle and the watching read has stopped (the client
// half-closed), nothing else does until the body ends or close() cancels it.
void HttpConnection::arm_tick() {
  tick_.expires_after(env_.options.keepalive_interval);
  tick_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (!ec) self->on_wakeup();
  });
}

// Reads while an answer is made or streamed: a hang-up ends the connection (and the generation)
// at once. The bytes of pipelined next requests are kept up to one head's worth; past that they
// are read and dropped, so that a hang-up is still seen, and the connection ends with this answer
// (its requests behind go unanswered: "Connection: close" where the head is still to be sent).
void HttpConnection::watch_peer() {
  if (peer_gone_) return;
  watching_ = true;
  const bool keep = buffer_.size() < env_.options.max_header_bytes;
  const auto into = keep ? buffer_.prepare(1024) : net::mutable_buffer(discard_, sizeof(discard_));
  stream_.socket().async_read_some(into, [self = shared_from_this(), keep](beast::error_code ec, size_t n) {
    if (keep) {
      self->buffer_.commit(n);
    } else if (n > 0) {
      self->keep_alive_ = false;
    }
    self->on_watch(ec, n);
  });
}

void HttpConnection::on_watch(beast::error_code ec, size_t bytes) {
  watching_ = false;
  if (closed_) return;
  // A half-close (or reset) is reported to one read only: after a read of 0 bytes Asio's reactor
  // waits for the socket's next readiness edge, which a half-close sends once, so a later read
  // would wait forever (seen with a half-close that came as the answer ended). It is kept here.
  if (ec ? ec != net::error::operation_aborted : bytes == 0) peer_gone_ = true;
  if (ending_) {
    ending_ = false;
    return next_or_close();
  }
  if (answer_) {
    HttpResponse response = std::move(*answer_);
    answer_.reset();
    return respond(std::move(response));
  }
  if (ec || bytes == 0) return close();
  watch_peer();
}

void HttpConnection::end_response() {
  body_.reset();
  tick_.cancel();
  if (watching_) {  // let the watching read finish first: one read at a time on the socket
    ending_ = true;
    beast::error_code ec;
    stream_.socket().cancel(ec);
    return;
  }
  next_or_close();
}

void HttpConnection::next_or_close() {
  if (closed_) return;
  if (peer_gone_) return close();  // the client said it sends nothing more, and it has its answer
  if (!keep_alive_) return graceful_close();
  wait_for_request();
}

// Half-close, then read and drop what the client still sends (up to a bound), so that the
// answer is not lost to a reset while a refused body is still arriving.
void HttpConnection::graceful_close() {
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_send, ec);
  if (ec) return close();
  stream_.expires_after(std::chrono::seconds(2));
  drain();
}

void HttpConnection::drain() {
  stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->discarded_ += n;
    if (ec || n == 0 || self->discarded_ > (4u << 20)) return self->close();
    self->drain();
  });
}

void HttpConnection::close() {
  if (closed_) return;
  closed_ = true;
  body_.reset();
  tick_.cancel();
  deadline_.cancel();
  beast::error_code ec;
  stream_.socket().shutdown(net::ip::tcp::socket::shutdown_both, ec);
  stream_.close();
}

}  // namespace tachyon::server
