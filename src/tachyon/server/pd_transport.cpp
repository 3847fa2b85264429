#include "tachyon/server/pd_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xxhash.h>

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
                                   std::chrono::milliseconds io_timeout, Observer observer)
    : exporter_(std::move(exporter)), releaser_(std::move(releaser)), observer_(std::move(observer)),
      io_timeout_(io_timeout) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  TACHYON_CHECK(listen_fd_ >= 0) << "cannot open the KV transfer socket: " << std::strerror(errno);
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
      ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listen_fd_, 64) != 0) {
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

void KvTransferServer::serve() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Socket socket(fd);
    answer(fd);
  }
}

void KvTransferServer::answer(int fd) {
  const auto start = Clock::now();
  const auto deadline = start + io_timeout_;
  char request[kRequestBytes];
  if (!recv_all(fd, request, sizeof(request), deadline)) return;
  uint32_t magic = 0, op = 0;
  engine::KvLeaseKey key;
  std::memcpy(&magic, request, 4);
  std::memcpy(&op, request + 4, 4);
  std::memcpy(&key.epoch, request + 8, 8);
  std::memcpy(&key.request_id, request + 16, 8);
  if (magic != kFrameMagic) return;
  if (op == kOpRelease) {
    releaser_(key);
    return;
  }
  if (op != kOpFetch) return;
  uint32_t status = kStatusPayload;
  std::string body;
  try {
    body = encode_kv_payload(exporter_(key));
  } catch (const std::exception& e) {
    status = kStatusError;
    body = e.what();
  }
  uint64_t checksum = XXH3_64bits(body.data(), body.size());
  const KvTransportFault fault = fault_.load();
  if (fault == KvTransportFault::kCorrupt && !body.empty()) body[body.size() / 2] ^= 0x5a;
  if (fault == KvTransportFault::kTruncate) body.resize(body.size() / 2);
  std::string head;
  put(head, kFrameMagic);
  put(head, status);
  put(head, static_cast<uint64_t>(fault == KvTransportFault::kTruncate ? body.size() * 2 : body.size()));
  if (fault == KvTransportFault::kStall) {  // the head and half the body, then silence past the deadline
    send_all(fd, head.data(), head.size(), deadline);
    send_all(fd, body.data(), body.size() / 2, deadline);
    std::this_thread::sleep_for(io_timeout_);
    return;
  }
  if (!send_all(fd, head.data(), head.size(), deadline) || !send_all(fd, body.data(), body.size(), deadline)) return;
  if (fault == KvTransportFault::kTruncate) return;
  if (send_all(fd, reinterpret_cast<const char*>(&checksum), sizeof(checksum), deadline) && observer_ &&
      status == kStatusPayload) {
    observer_(static_cast<int64_t>(body.size()),
              std::chrono::duration<double>(Clock::now() - start).count());
  }
}

}  // namespace tachyon::server
