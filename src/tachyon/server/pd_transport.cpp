#include "tachyon/server/pd_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace tachyon::server {
namespace {

using engine::KvTransferError;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kFrameMagic = 0x31564b54;  // "TKV1"
constexpr uint32_t kOpFetch = 1;
constexpr uint32_t kOpRelease = 2;
constexpr uint32_t kStatusPayload = 0;
constexpr uint32_t kStatusError = 1;
constexpr size_t kRequestBytes = 4 + 4 + 8 + 8;
constexpr uint64_t kMaxBody = uint64_t{1} << 34;  // 16 GiB: a length beyond it is a broken frame

template <typename T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

template <typename T>
T take(const std::string& in, size_t& offset) {
  if (offset + sizeof(T) > in.size()) throw KvTransferError("KV frame body ends early");
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  offset += sizeof(T);
  return value;
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Whole-buffer I/O against a deadline; false on timeout, close or error.
bool send_all(int fd, const char* data, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) <= 0) return false;
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool recv_all(int fd, char* data, size_t size, Clock::time_point deadline) {
  while (size > 0) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, remaining_ms(deadline)) <= 0) return false;
    const ssize_t n = ::recv(fd, data, size, 0);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

struct Socket {
  int fd = -1;
  explicit Socket(int f) : fd(f) {}
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

int connect_to(const std::string& host, int port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0 || found == nullptr) {
    throw KvTransferError("cannot resolve the prefill server's KV address " + host + ":" + std::to_string(port));
  }
  const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int rc = fd < 0 ? -1 : ::connect(fd, found->ai_addr, found->ai_addrlen);
  ::freeaddrinfo(found);
  if (fd >= 0 && rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int error = 0;
    socklen_t len = sizeof(error);
    rc = ::poll(&p, 1, remaining_ms(deadline)) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 &&
                 error == 0
             ? 0
             : -1;
  }
  if (rc != 0) {
    if (fd >= 0) ::close(fd);
    throw KvTransferError("cannot connect to the prefill server's KV port " + host + ":" + std::to_string(port));
  }
  return fd;
}

void send_request(int fd, uint32_t op, engine::KvLeaseKey key, Clock::time_point deadline) {
  std::string request;
  put(request, kFrameMagic);
  put(request, op);
  put(request, key.epoch);
  put(request, key.request_id);
  if (!send_all(fd, request.data(), request.size(), deadline)) throw KvTransferError("sending the KV request failed");
}

}  // namespace

std::string encode_kv_payload(const engine::KvPayload& payload) {
  std::string body;
  body.reserve(40 + payload.prompt.size() * 4 + payload.rows.size() * 4);
  put(body, static_cast<uint64_t>(payload.prompt.size()));
  body.append(reinterpret_cast<const char*>(payload.prompt.data()), payload.prompt.size() * sizeof(int32_t));
  put(body, payload.first_token);
  put(body, payload.seed);
  put(body, payload.values_per_token);
  body.append(reinterpret_cast<const char*>(payload.rows.data()), payload.rows.size() * sizeof(float));
  return body;
}

int64_t kv_payload_bytes(const engine::KvPayload& payload) {
  return static_cast<int64_t>(sizeof(uint64_t) + payload.prompt.size() * sizeof(int32_t) + sizeof(int32_t) +
                              sizeof(uint64_t) + sizeof(int64_t) + payload.rows.size() * sizeof(float));
}

engine::KvPayload decode_kv_payload(const std::string& body) {
  engine::KvPayload payload;
  size_t offset = 0;
  const auto prompt_len = take<uint64_t>(body, offset);
  if (prompt_len == 0 || prompt_len > body.size() / sizeof(int32_t)) throw KvTransferError("KV frame: bad prompt length");
  payload.prompt.resize(prompt_len);
  if (offset + prompt_len * sizeof(int32_t) > body.size()) throw KvTransferError("KV frame body ends early");
  std::memcpy(payload.prompt.data(), body.data() + offset, prompt_len * sizeof(int32_t));
  offset += prompt_len * sizeof(int32_t);
  payload.first_token = take<int32_t>(body, offset);
  payload.seed = take<uint64_t>(body, offset);
  payload.values_per_token = take<int64_t>(body, offset);
  const size_t rows_bytes = body.size() - offset;
  if (payload.values_per_token <= 0 ||
      rows_bytes != prompt_len * static_cast<uint64_t>(payload.values_per_token) * sizeof(float)) {
    throw KvTransferError("KV frame: " + std::to_string(rows_bytes) + " row bytes for " + std::to_string(prompt_len) +
                          " tokens of " + std::to_string(payload.values_per_token) + " values");
  }
  payload.rows.resize(rows_bytes / sizeof(float));
  std::memcpy(payload.rows.data(), body.data() + offset, rows_bytes);
  return payload;
}

engine::KvPayload fetch_kv(const std::string& host, int port, engine::KvLeaseKey key, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  Socket socket(connect_to(host, port, deadline));
  send_request(socket.fd, kOpFetch, key, deadline);
  char head[16];
  if (!recv_all(socket.fd, head, sizeof(head), deadline)) throw KvTransferError("the KV frame's head did not arrive in time");
  uint32_t magic = 0, status = 0;
  uint64_t body_len = 0;
  std::memcpy(&magic, head, 4);
  std::memcpy(&status, head + 4, 4);
  std::memcpy(&body_len, head + 8, 8);
  if (magic != kFrameMagic || body_len > kMaxBody) throw KvTransferError("not a KV frame (bad magic or length)");
  std::string body(body_len, '\0');
  uint64_t checksum = 0;
  if (!recv_all(socket.fd, body.data(), body.size(), deadline) ||
      !recv_all(socket.fd, reinterpret_cast<char*>(&checksum), sizeof(checksum), deadline)) {
    throw KvTransferError("the KV frame was cut short or timed out (" + std::to_string(body_len) + " body bytes expected)");
  }
  if (XXH3_64bits(body.data(), body.size()) != checksum) throw KvTransferError("the KV frame's checksum does not match");
  if (status == kStatusError) throw KvTransferError("the prefill server refused: " + body);
  if (status != kStatusPayload) throw KvTransferError("KV frame: unknown status " + std::to_string(status));
  return decode_kv_payload(body);
}

void release_kv_remote(const std::string& host, int port, engine::KvLeaseKey key, std::chrono::milliseconds timeout) {
  try {
    const auto deadline = Clock::now() + timeout;
    Socket socket(connect_to(host, port, deadline));
    send_request(socket.fd, kOpRelease, key, deadline);
  } catch (const KvTransferError&) {
    // The lease times out on its own.
  }
}

KvTransportFault kv_transport_fault_from_env() {
  const char* value = std::getenv("TACHYON_KV_TRANSFER_FAULT");
  const std::string fault = value != nullptr ? value : "";
  if (fault.empty()) return KvTransportFault::kNone;
  if (fault == "truncate") return KvTransportFault::kTruncate;
  if (fault == "corrupt") return KvTransportFault::kCorrupt;
  if (fault == "stall") return KvTransportFault::kStall;
  TACHYON_CHECK(false) << "TACHYON_KV_TRANSFER_FAULT=" << fault << ": give truncate, corrupt or stall";
  return KvTransportFault::kNone;
}

KvTransferServer::KvTransferServer(const std::string& host, int port, Exporter exporter, Releaser releaser,
                                   std::chrono::milliseconds io_timeout, Observer observer, int max_pulls)
    : exporter_(std::move(exporter)), releaser_(std::move(releaser)), observer_(std::move(observer)),
      io_timeout_(io_timeout), max_pulls_(max_pulls) {
  TACHYON_CHECK(max_pulls_ >= 1) << "the KV transfer server needs at least one pull at a time (got " << max_pulls_ << ")";
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  TACHYON_CHECK(listen_fd_ >= 0) << "cannot open the KV transfer socket: " << std::strerror(errno);
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
      ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listen_fd_, 256) != 0) {
    const std::string why = std::strerror(errno);
    ::close(listen_fd_);
    TACHYON_CHECK(false) << "cannot listen for KV transfers on " << host << ":" << port << ": " << why
                         << " (give --kv-transfer-port another port, or an IPv4 --host)";
  }
  socklen_t len = sizeof(addr);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

KvTransferServer::~KvTransferServer() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
}

KvPullStats KvTransferServer::pull_stats() const {
  return {in_flight_.load(), peak_in_flight_.load(), refused_.load()};
}

// One thread serves every connection: non-blocking sockets under poll(), each connection a small
// state machine (read the request, then write the frame), so pulls overlap without a thread each.
void KvTransferServer::serve() {
  std::vector<Connection> connections;
  std::vector<pollfd> fds;
  while (!stopping_) {
    fds.assign(1, pollfd{listen_fd_, POLLIN, 0});
    for (const Connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.phase == Phase::kWriting ? POLLOUT : POLLIN), 0});
    }
    ::poll(fds.data(), fds.size(), 50);
    if (fds[0].revents & POLLIN) {
      for (int fd; (fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
        const auto now = Clock::now();
        connections.push_back({.fd = fd, .start = now, .deadline = now + io_timeout_});
      }
    }
    const auto now = Clock::now();
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& c = connections[i];
      const short events = i + 1 < fds.size() ? fds[i + 1].revents : 0;
      bool done = now >= c.deadline;
      if (!done && c.phase == Phase::kReading && (events & (POLLIN | POLLHUP | POLLERR))) done = read_request(c);
      if (!done && c.phase == Phase::kWriting && (events & (POLLOUT | POLLHUP | POLLERR))) done = write_frame(c);
      if (!done && c.phase == Phase::kStalling && (events & (POLLHUP | POLLERR))) done = true;
      if (done) close_connection(c);
    }
    std::erase_if(connections, [](const Connection& c) { return c.fd < 0; });
  }
  for (Connection& c : connections) close_connection(c);
}

bool KvTransferServer::read_request(Connection& c) {
  char buffer[kRequestBytes];
  const ssize_t n = ::recv(c.fd, buffer, kRequestBytes - c.in.size(), 0);
  if (n <= 0) return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  c.in.append(buffer, static_cast<size_t>(n));
  if (c.in.size() < kRequestBytes) return false;
  uint32_t magic = 0, op = 0;
  engine::KvLeaseKey key;
  std::memcpy(&magic, c.in.data(), 4);
  std::memcpy(&op, c.in.data() + 4, 4);
  std::memcpy(&key.epoch, c.in.data() + 8, 8);
  std::memcpy(&key.request_id, c.in.data() + 16, 8);
  if (magic != kFrameMagic) return true;
  if (op == kOpRelease) {
    releaser_(key);
    return true;
  }
  if (op != kOpFetch) return true;
  if (in_flight_.load() >= max_pulls_) {  // refused at once: the decode side computes the prompt itself
    ++refused_;
    prepare_frame(c, kStatusError,
                  "the prefill server is serving " + std::to_string(max_pulls_) + " KV pulls (--kv-transfer-max-pulls)",
                  KvTransportFault::kNone);
    return false;
  }
  c.counted = true;
  peak_in_flight_.store(std::max(peak_in_flight_.load(), ++in_flight_));
  uint32_t status = kStatusPayload;
  std::string body;
  try {
    body = encode_kv_payload(exporter_(key));
  } catch (const std::exception& e) {
    status = kStatusError;
    body = e.what();
  }
  prepare_frame(c, status, std::move(body), fault_.load());
  return false;
}

// The frame to send, with the injected fault applied; a stall sends half of it, then nothing.
void KvTransferServer::prepare_frame(Connection& c, uint32_t status, std::string body, KvTransportFault fault) {
  const uint64_t checksum = XXH3_64bits(body.data(), body.size());
  if (fault == KvTransportFault::kCorrupt && !body.empty()) body[body.size() / 2] ^= 0x5a;
  const uint64_t declared = body.size();
  if (fault == KvTransportFault::kTruncate) body.resize(body.size() / 2);
  put(c.out, kFrameMagic);
  put(c.out, status);
  put(c.out, declared);
  c.out += body;
  if (fault == KvTransportFault::kStall) c.out.resize(16 + declared / 2);
  if (fault == KvTransportFault::kNone || fault == KvTransportFault::kCorrupt) put(c.out, checksum);
  c.payload_bytes = status == kStatusPayload && (fault == KvTransportFault::kNone) ? static_cast<int64_t>(declared) : 0;
  c.stall_after = fault == KvTransportFault::kStall;
  c.phase = Phase::kWriting;
}

bool KvTransferServer::write_frame(Connection& c) {
  const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  c.sent += static_cast<size_t>(n);
  if (c.sent < c.out.size()) return false;
  if (c.stall_after) {  // silence until the deadline, then a closed connection
    c.phase = Phase::kStalling;
    return false;
  }
  if (observer_ && c.payload_bytes > 0) {
    observer_(c.payload_bytes, std::chrono::duration<double>(Clock::now() - c.start).count());
  }
  return true;
}

void KvTransferServer::close_connection(Connection& c) {
  if (c.fd < 0) return;
  ::close(c.fd);
  c.fd = -1;
  if (c.counted) --in_flight_;
  c.counted = false;
}

}  // namespace tachyon::server
