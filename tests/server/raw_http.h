// Raw HTTP/1.x over loopback TCP for the abuse tests. They must send what no client library
// sends (half a head, a byte a second, two Content-Lengths, a NUL in the method) and see exactly
// what comes back, "nothing, and the connection closed" included. So: plain non-blocking
// sockets, every wait bounded by a deadline (a test never hangs on a server that does), and a
// response reader that rejects what a strict client would reject instead of guessing.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tachyon::server::testing {

using Clock = std::chrono::steady_clock;

// Starts a non-blocking connect to 127.0.0.1:port; -1 when no socket could be made (EMFILE).
// On loopback the handshake completes at once unless the listen backlog is full. `source`, an
// address of 127.0.0.0/8 ("127.0.0.7"), makes the client look like another host to the server.
inline int connect_local(int port, const std::string& source = "") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));  // a dripped byte leaves now
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  if (!source.empty() && (::inet_pton(AF_INET, source.c_str(), &addr.sin_addr) != 1 ||
                          ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0)) {
    ::close(fd);
    return -1;
  }
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline int poll_ms(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
}

// Waits for a connect_local() to finish; false when it failed or did not finish in time.
inline bool wait_connected(int fd, Clock::duration limit) {
  pollfd p{fd, POLLOUT, 0};
  if (::poll(&p, 1, poll_ms(Clock::now() + limit)) != 1) return false;
  int error = 0;
  socklen_t len = sizeof(error);
  return ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
}

// A request with Host and, for a body, Content-Type and Content-Length.
inline std::string http_request(std::string_view method, std::string_view target, std::string_view body = {},
                                std::string_view extra_headers = {}, std::string_view version = "HTTP/1.1") {
  std::string r =
      std::string(method) + " " + std::string(target) + " " + std::string(version) + "\r\nHost: 127.0.0.1\r\n";
  if (!body.empty() || method == "POST") {
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  return r + std::string(extra_headers) + "\r\n" + std::string(body);
}

struct RawResponse {
  std::string version;  // "HTTP/1.1" or "HTTP/1.0"
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // in the order sent
  std::string body;                                          // de-chunked

  // The first value of a header (names compare case-insensitively); "" when absent.
  std::string header(std::string_view name) const {
    for (const auto& [key, value] : headers) {
      if (std::equal(key.begin(), key.end(), name.begin(), name.end(),
                     [](unsigned char a, unsigned char b) { return std::tolower(a) == std::tolower(b); })) {
        return value;
      }
    }
    return "";
  }
  bool chunked() const { return header("Transfer-Encoding").find("chunked") != std::string::npos; }
};

// kClosed: the peer closed before sending a byte of the response. kMalformed: what it sent is not
// HTTP/1.x (a bad status line, header field or chunk size). kTruncated: a good head (kept in the
// response), then the peer closed before the body's end.
enum class ReadResult { kResponse, kClosed, kTimeout, kMalformed, kTruncated };

inline std::ostream& operator<<(std::ostream& out, ReadResult r) {
  const char* names[] = {"a response", "closed", "timeout", "malformed", "truncated"};
  return out << names[static_cast<int>(r)];
}

// One connection. Owns its socket; moves, never copies.
class RawConnection {
 public:
  explicit RawConnection(int port, const std::string& source = "") : fd_(connect_local(port, source)) {
    if (fd_ >= 0 && !wait_connected(fd_, std::chrono::seconds(5))) close();
  }
  static RawConnection adopt(int fd) { return RawConnection(fd, 0); }  // a connected non-blocking socket
  RawConnection(RawConnection&& o) noexcept
      : fd_(std::exchange(o.fd_, -1)), buffer_(std::move(o.buffer_)), eof_(o.eof_) {}
  RawConnection& operator=(RawConnection&& o) noexcept {
    std::swap(fd_, o.fd_);
    std::swap(buffer_, o.buffer_);
    std::swap(eof_, o.eof_);
    return *this;
  }
  ~RawConnection() { close(); }

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // Bytes received and not consumed by read_response (what a closed connection left behind).
  const std::string& pending() const { return buffer_; }

  // Writes every byte; false once the peer has closed or reset (never SIGPIPE).
  bool send(std::string_view bytes, Clock::duration limit = std::chrono::seconds(5)) {
    const auto deadline = Clock::now() + limit;
    while (!bytes.empty() && fd_ >= 0) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n > 0) {
        bytes.remove_prefix(static_cast<size_t>(n));
      } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        pollfd p{fd_, POLLOUT, 0};
        if (::poll(&p, 1, poll_ms(deadline)) == 0) return false;
      } else {
        return false;
      }
    }
    return bytes.empty();
  }
  // "I have nothing more to say": a server cannot wait for the rest of a request after this.
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  // Closes with a reset instead of FIN: leaves no TIME_WAIT behind (fuzzers open many thousands).
  void reset() {
    linger l{1, 0};
    if (fd_ >= 0) ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    close();
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Reads one response, skipping interim 1xx ones. (No test sends HEAD, whose answer has no body.)
  ReadResult read_response(RawResponse& out, Clock::duration limit) {
    const auto deadline = Clock::now() + limit;
    for (;;) {
      out = RawResponse{};
      ReadResult r = fill_until([&] { return buffer_.find("\r\n\r\n") != std::string::npos; }, deadline);
      if (r != ReadResult::kResponse) return r == ReadResult::kClosed && !buffer_.empty() ? ReadResult::kMalformed : r;
      const size_t end = buffer_.find("\r\n\r\n");
      if (!parse_head(std::string_view(buffer_).substr(0, end), out)) return ReadResult::kMalformed;
      buffer_.erase(0, end + 4);
      if (out.status >= 100 && out.status < 200) continue;
      if (out.status == 204 || out.status == 304) return ReadResult::kResponse;
      if (out.chunked()) return read_chunked(out.body, deadline);
      if (std::string length = out.header("Content-Length"); !length.empty()) {
        if (length.find_first_not_of("0123456789") != std::string::npos || length.size() > 12) {
          return ReadResult::kMalformed;
        }
        const size_t n = std::stoull(length);
        r = fill_until([&] { return buffer_.size() >= n; }, deadline);
        if (r != ReadResult::kResponse) return r == ReadResult::kClosed ? ReadResult::kTruncated : r;
        out.body = buffer_.substr(0, n);
        buffer_.erase(0, n);
        return ReadResult::kResponse;
      }
      r = fill_until([] { return false; }, deadline);  // the body runs to the close
      out.body = std::move(buffer_);
      buffer_.clear();
      return r == ReadResult::kClosed ? ReadResult::kResponse : r;
    }
  }
  // Reads until `marker` has arrived (raw bytes, left in pending()); false on close or timeout.
  bool read_until(std::string_view marker, Clock::duration limit) {
    return fill_until([&] { return buffer_.find(marker) != std::string::npos; }, Clock::now() + limit) ==
           ReadResult::kResponse;
  }
  // Waits for the peer to close (bytes that arrive meanwhile land in pending()).
  bool wait_closed(Clock::duration limit) {
    return fill_until([] { return false; }, Clock::now() + limit) == ReadResult::kClosed;
  }

 private:
  RawConnection(int fd, int) : fd_(fd) {}

  // Receives until ready() holds (kResponse), the peer closes or resets (kClosed), or the deadline.
  template <class Ready>
  ReadResult fill_until(Ready ready, Clock::time_point deadline) {
    char chunk[65536];
    while (!ready()) {
      if (eof_ || fd_ < 0) return ReadResult::kClosed;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, poll_ms(deadline)) == 0) return ReadResult::kTimeout;
      ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
      if (n > 0) {
        buffer_.append(chunk, static_cast<size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        eof_ = true;
      }
    }
    return ReadResult::kResponse;
  }

  // "HTTP/1.x DDD reason" then "Name: value" lines. Anything else is not HTTP/1.x.
  static bool parse_head(std::string_view head, RawResponse& out) {
    size_t eol = std::min(head.find("\r\n"), head.size());
    std::string_view line = head.substr(0, eol);
    if (line.size() < 12 || (line.substr(0, 9) != "HTTP/1.1 " && line.substr(0, 9) != "HTTP/1.0 ")) return false;
    auto digit = [](unsigned char c) { return std::isdigit(c) != 0; };
    if (!std::all_of(line.begin() + 9, line.begin() + 12, digit) || (line.size() > 12 && line[12] != ' ')) {
      return false;
    }
    out.version = std::string(line.substr(0, 8));
    out.status = std::stoi(std::string(line.substr(9, 3)));
    while (eol < head.size()) {
      size_t start = eol + 2;
      eol = std::min(head.find("\r\n", start), head.size());
      line = head.substr(start, eol - start);
      size_t colon = line.find(':');
      if (colon == 0 || colon == std::string_view::npos ||
          line.substr(0, colon).find_first_of(" \t") != std::string_view::npos) {
        return false;
      }
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
      out.headers.emplace_back(std::string(line.substr(0, colon)), std::string(value));
    }
    return true;
  }

  // "<hex size>[;ext]\r\n<data>\r\n" ... "0\r\n" trailers "\r\n".
  ReadResult read_chunked(std::string& body, Clock::time_point deadline) {
    auto need = [&](auto ready) {
      ReadResult r = fill_until(ready, deadline);
      return r == ReadResult::kClosed ? ReadResult::kTruncated : r;
    };
    for (;;) {
      ReadResult r = need([&] { return buffer_.find("\r\n") != std::string::npos; });
      if (r != ReadResult::kResponse) return r;
      std::string size_text = buffer_.substr(0, std::min(buffer_.find("\r\n"), buffer_.find(';')));
      if (size_text.empty() || size_text.size() > 8 ||
          size_text.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
        return ReadResult::kMalformed;
      }
      const size_t size = std::stoul(size_text, nullptr, 16);
      buffer_.erase(0, buffer_.find("\r\n") + 2);
      if (size == 0) break;
      r = need([&] { return buffer_.size() >= size + 2; });
      if (r != ReadResult::kResponse) return r;
      if (buffer_.compare(size, 2, "\r\n") != 0) return ReadResult::kMalformed;
      body.append(buffer_, 0, size);
      buffer_.erase(0, size + 2);
    }
    for (;;) {  // trailer fields, up to the empty line
      ReadResult r = need([&] { return buffer_.find("\r\n") != std::string::npos; });
      if (r != ReadResult::kResponse) return r;
      const size_t eol = buffer_.find("\r\n");
      buffer_.erase(0, eol + 2);
      if (eol == 0) return ReadResult::kResponse;
    }
  }

  int fd_ = -1;
  std::string buffer_;  // received, not yet consumed
  bool eof_ = false;
};

}  // namespace tachyon::server::testing
