#include "tachyon/server/pd_transport.h"

#include "tachyon/base/byte_codec.h"
#include "tachyon/engine/engine_core.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
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
constexpr uint32_t kOpFetchByReference = 3;  // followed by the puller's fingerprint hash u64
constexpr uint32_t kCopyMagic = 0x43564b54;  // "TKVC": the by-reference puller's word after its copy
constexpr uint32_t kStatusError = 1;
constexpr uint32_t kStatusChunk = 2;
constexpr uint32_t kStatusCommit = 3;
constexpr uint32_t kStatusHeartbeat = 4;
constexpr uint32_t kStatusReference = 6;
constexpr uint32_t kStatusBlocks = 7;
constexpr uint32_t kStatusConfirmed = 8;
constexpr auto kHeartbeatEvery = std::chrono::milliseconds(250);  // while a prompt runs with no rows ready
constexpr size_t kFrameHead = 16;
constexpr size_t kRequestBytes = 4 + 4 + 8 + 8;
constexpr size_t kReferenceRequestBytes = kRequestBytes + 8;
constexpr size_t kCopyWordBytes = 4 + 4;
// The by-reference confirmation: one exchange with a KV port on the same node (well under a
// millisecond when the port's thread is alive).
constexpr std::chrono::milliseconds kConfirmTimeout{1000};
constexpr uint64_t kMaxBody = uint64_t{1} << 34;  // 16 GiB: a length beyond it is a broken frame

template <typename T>
T take(const std::string& in, size_t& offset) {
  if (std::optional<T> value = take_value<T>(in, offset)) return *value;
  throw KvTransferError("KV frame body ends early");
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

// Waits until `fd` is readable; false at the deadline, on an error, or once `cancel` is raised
// (looked at every 100 ms, so that a stopping server's pulls end at once, not at their deadline).
bool wait_readable(int fd, Clock::time_point deadline, const std::atomic<bool>* cancel) {
  for (;;) {
    if (cancel != nullptr && cancel->load()) return false;
    const int left = remaining_ms(deadline);
    const int slice = cancel != nullptr ? std::min(left, 100) : left;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, slice);
    if (ready > 0) return true;
    if (ready < 0 || slice == left) return false;
  }
}

bool recv_all(int fd, char* data, size_t size, Clock::time_point deadline, const std::atomic<bool>* cancel = nullptr) {
  while (size > 0) {
    if (!wait_readable(fd, deadline, cancel)) return false;
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

uint64_t fingerprint_hash(const std::string& fingerprint) { return XXH3_64bits(fingerprint.data(), fingerprint.size()); }

void send_request(int fd, uint32_t op, engine::KvLeaseKey key, Clock::time_point deadline,
                  const std::string& fingerprint = "") {
  std::string request;
  put_value(request, kFrameMagic);
  put_value(request, op);
  put_value(request, key.epoch);
  put_value(request, key.request_id);
  if (op == kOpFetchByReference) put_value(request, fingerprint_hash(fingerprint));
  if (!send_all(fd, request.data(), request.size(), deadline)) throw KvTransferError("sending the KV request failed");
}

}  // namespace

std::string encode_kv_chunk(const engine::KvChunk& chunk, int64_t values_per_token) {
  std::string body;
  body.reserve(24 + chunk.rows.size() * sizeof(float));
  put_value(body, static_cast<uint64_t>(chunk.begin));
  put_value(body, static_cast<uint64_t>(chunk.num_tokens));
  put_value(body, values_per_token);
  body.append(reinterpret_cast<const char*>(chunk.rows.data()), chunk.rows.size() * sizeof(float));
  return body;
}

engine::KvChunk decode_kv_chunk(const std::string& body, int64_t& values_per_token) {
  engine::KvChunk chunk;
  size_t offset = 0;
  chunk.begin = static_cast<int64_t>(take<uint64_t>(body, offset));
  chunk.num_tokens = static_cast<int64_t>(take<uint64_t>(body, offset));
  values_per_token = take<int64_t>(body, offset);
  const size_t rows_bytes = body.size() - offset;
  if (chunk.begin < 0 || chunk.num_tokens <= 0 || values_per_token <= 0 ||
      rows_bytes != static_cast<uint64_t>(chunk.num_tokens) * static_cast<uint64_t>(values_per_token) * sizeof(float)) {
    throw KvTransferError("KV chunk: " + std::to_string(rows_bytes) + " row bytes for " +
                          std::to_string(chunk.num_tokens) + " tokens of " + std::to_string(values_per_token) + " values");
  }
  chunk.rows.resize(rows_bytes / sizeof(float));
  std::memcpy(chunk.rows.data(), body.data() + offset, rows_bytes);
  return chunk;
}

std::string encode_kv_commit(const engine::KvCommit& commit, uint64_t chunks_checksum) {
  std::string body;
  put_value(body, static_cast<uint64_t>(commit.prompt.size()));
  body.append(reinterpret_cast<const char*>(commit.prompt.data()), commit.prompt.size() * sizeof(int32_t));
  put_value(body, commit.first_token);
  put_value(body, commit.seed);
  put_value(body, commit.cached_tokens);
  put_value(body, commit.values_per_token);
  put_value(body, static_cast<uint64_t>(commit.num_chunks));
  put_value(body, chunks_checksum);
  put_value(body, static_cast<uint64_t>(commit.draft_state.size()));
  body.append(commit.draft_state);
  return body;
}

engine::KvCommit decode_kv_commit(const std::string& body, uint64_t& chunks_checksum) {
  engine::KvCommit commit;
  size_t offset = 0;
  const auto prompt_len = take<uint64_t>(body, offset);
  if (prompt_len == 0 || prompt_len > body.size() / sizeof(int32_t)) throw KvTransferError("KV commit: bad prompt length");
  commit.prompt.resize(prompt_len);
  if (offset + prompt_len * sizeof(int32_t) > body.size()) throw KvTransferError("KV frame body ends early");
  std::memcpy(commit.prompt.data(), body.data() + offset, prompt_len * sizeof(int32_t));
  offset += prompt_len * sizeof(int32_t);
  commit.first_token = take<int32_t>(body, offset);
  commit.seed = take<uint64_t>(body, offset);
  commit.cached_tokens = take<int64_t>(body, offset);
  if (commit.cached_tokens < 0 || commit.cached_tokens > static_cast<int64_t>(prompt_len)) {
    throw KvTransferError("KV commit: " + std::to_string(commit.cached_tokens) + " cached tokens of a prompt of " +
                          std::to_string(prompt_len));
  }
  commit.values_per_token = take<int64_t>(body, offset);
  commit.num_chunks = static_cast<int64_t>(take<uint64_t>(body, offset));
  chunks_checksum = take<uint64_t>(body, offset);
  const auto draft_state_len = take<uint64_t>(body, offset);
  if (draft_state_len > body.size() - offset) throw KvTransferError("KV commit: bad drafter state length");
  commit.draft_state = body.substr(offset, draft_state_len);
  offset += draft_state_len;
  if (offset != body.size()) throw KvTransferError("KV commit: " + std::to_string(body.size() - offset) + " bytes too many");
  return commit;
}

std::string encode_kv_block_chunk(const engine::KvChunk& chunk) {
  std::string body;
  put_value(body, static_cast<uint64_t>(chunk.begin));
  put_value(body, static_cast<uint64_t>(chunk.num_tokens));
  put_value(body, static_cast<uint64_t>(chunk.blocks.size()));
  body.append(reinterpret_cast<const char*>(chunk.blocks.data()), chunk.blocks.size() * sizeof(int32_t));
  return body;
}

engine::KvChunk decode_kv_block_chunk(const std::string& body) {
  engine::KvChunk chunk;
  size_t offset = 0;
  chunk.begin = static_cast<int64_t>(take<uint64_t>(body, offset));
  chunk.num_tokens = static_cast<int64_t>(take<uint64_t>(body, offset));
  const auto count = take<uint64_t>(body, offset);
  if (chunk.begin < 0 || chunk.num_tokens <= 0 || count == 0 || count > static_cast<uint64_t>(chunk.num_tokens) ||
      body.size() - offset != count * sizeof(int32_t)) {
    throw KvTransferError("KV block chunk: " + std::to_string(body.size() - offset) + " bytes for " +
                          std::to_string(count) + " blocks of " + std::to_string(chunk.num_tokens) + " tokens");
  }
  chunk.blocks.resize(count);
  std::memcpy(chunk.blocks.data(), body.data() + offset, count * sizeof(int32_t));
  for (int32_t block : chunk.blocks) {
    if (block < 0) throw KvTransferError("KV block chunk: a negative block id");
  }
  return chunk;
}

int64_t kv_payload_bytes(const engine::KvPayload& payload) {
  int64_t bytes = static_cast<int64_t>(8 + payload.prompt.size() * sizeof(int32_t) + 4 + 8 + 8 + 8 + 8 + 8 + 8 +
                                       payload.draft_state.size());
  for (const auto& chunk : payload.chunks) {
    bytes += static_cast<int64_t>(24 + chunk->rows.size() * sizeof(float) + chunk->blocks.size() * sizeof(int32_t));
  }
  return bytes;
}

namespace {

// The by-reference puller's word once its copy is done; true when the source answers that it held
// the blocks throughout (status 8) within `timeout`.
bool confirm_copy(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string word;
  put_value(word, kCopyMagic);
  put_value(word, uint32_t{1});
  if (!send_all(fd, word.data(), word.size(), deadline)) return false;
  char head[kFrameHead];
  if (!recv_all(fd, head, sizeof(head), deadline)) return false;
  uint32_t magic = 0, status = 0;
  uint64_t body_len = 0;
  std::memcpy(&magic, head, 4);
  std::memcpy(&status, head + 4, 4);
  std::memcpy(&body_len, head + 8, 8);
  return magic == kFrameMagic && status == kStatusConfirmed && body_len == 0;
}

}  // namespace

engine::KvPayload fetch_kv(const std::string& host, int port, engine::KvLeaseKey key,
                           std::chrono::milliseconds idle_timeout, std::chrono::milliseconds total_timeout,
                           const std::atomic<bool>* cancel, const std::string& reference_fingerprint) {
  const auto start = Clock::now();
  const auto give_up = start + total_timeout;
  auto deadline = [&] { return std::min(give_up, Clock::now() + idle_timeout); };
  auto socket = std::make_shared<Socket>(connect_to(host, port, deadline()));
  send_request(socket->fd, reference_fingerprint.empty() ? kOpFetch : kOpFetchByReference, key, deadline(),
               reference_fingerprint);
  engine::KvPayload payload;
  std::string sums;  // the chunks' body checksums, in order, as the commit's checksum covers them
  int64_t next_token = 0;
  int64_t values_per_token = -1;
  for (;;) {
    char head[kFrameHead];
    if (!recv_all(socket->fd, head, sizeof(head), deadline(), cancel)) {
      if (cancel != nullptr && cancel->load()) throw KvTransferError("the pull was cancelled (this server is stopping)");
      throw KvTransferError("no KV frame within the deadline after " + std::to_string(payload.chunks.size()) +
                            " chunks (the prefill server stalled, died or is still queueing the prompt)");
    }
    uint32_t magic = 0, status = 0;
    uint64_t body_len = 0;
    std::memcpy(&magic, head, 4);
    std::memcpy(&status, head + 4, 4);
    std::memcpy(&body_len, head + 8, 8);
    if (magic != kFrameMagic || body_len > kMaxBody) throw KvTransferError("not a KV frame (bad magic or length)");
    std::string body(body_len, '\0');
    uint64_t checksum = 0;
    if (!recv_all(socket->fd, body.data(), body.size(), deadline(), cancel) ||
        !recv_all(socket->fd, reinterpret_cast<char*>(&checksum), sizeof(checksum), deadline(), cancel)) {
      if (cancel != nullptr && cancel->load()) throw KvTransferError("the pull was cancelled (this server is stopping)");
      throw KvTransferError("a KV frame was cut short or timed out after " + std::to_string(payload.chunks.size()) +
                            " whole chunks (" + std::to_string(body_len) + " body bytes expected)");
    }
    if (XXH3_64bits(body.data(), body.size()) != checksum) throw KvTransferError("a KV frame's checksum does not match");
    if (status == kStatusHeartbeat) continue;
    if (status == kStatusError) throw KvTransferError("the prefill server refused: " + body);
    if (status == kStatusReference) {
      size_t offset = 0;
      payload.reference_block_size = static_cast<int64_t>(take<uint64_t>(body, offset));
      payload.reference = body.substr(offset);
      if (reference_fingerprint.empty() || payload.reference.empty() || payload.reference_block_size <= 0 ||
          !payload.chunks.empty()) {
        throw KvTransferError("an unasked or malformed by-reference KV frame");
      }
      continue;
    }
    if (status == kStatusBlocks) {
      engine::KvChunk chunk = decode_kv_block_chunk(body);
      if (!payload.by_reference() || chunk.begin != next_token) {
        throw KvTransferError("a by-reference KV chunk out of order: tokens from " + std::to_string(chunk.begin) +
                              " after " + std::to_string(next_token));
      }
      next_token += chunk.num_tokens;
      put_value(sums, checksum);
      payload.chunks.push_back(std::make_shared<const engine::KvChunk>(std::move(chunk)));
      continue;
    }
    if (status == kStatusChunk) {
      if (payload.by_reference()) throw KvTransferError("a KV rows chunk in a by-reference stream");
      int64_t width = 0;
      engine::KvChunk chunk = decode_kv_chunk(body, width);
      if (chunk.begin != next_token || (values_per_token >= 0 && width != values_per_token)) {
        throw KvTransferError("a KV chunk out of order: tokens from " + std::to_string(chunk.begin) + " after " +
                              std::to_string(next_token));
      }
      values_per_token = width;
      next_token += chunk.num_tokens;
      put_value(sums, checksum);
      payload.chunks.push_back(std::make_shared<const engine::KvChunk>(std::move(chunk)));
      continue;
    }
    if (status != kStatusCommit) throw KvTransferError("KV frame: unknown status " + std::to_string(status));
    uint64_t chunks_checksum = 0;
    engine::KvCommit commit = decode_kv_commit(body, chunks_checksum);
    if (commit.num_chunks != static_cast<int64_t>(payload.chunks.size()) ||
        chunks_checksum != XXH3_64bits(sums.data(), sums.size()) ||
        next_token != static_cast<int64_t>(commit.prompt.size()) ||
        (values_per_token >= 0 && values_per_token != commit.values_per_token)) {
      throw KvTransferError("the KV commit names " + std::to_string(commit.num_chunks) + " chunks of " +
                            std::to_string(commit.prompt.size()) + " tokens; " + std::to_string(payload.chunks.size()) +
                            " chunks of " + std::to_string(next_token) + " tokens arrived (or their checksums differ)");
    }
    payload.prompt = std::move(commit.prompt);
    payload.first_token = commit.first_token;
    payload.seed = commit.seed;
    payload.cached_tokens = commit.cached_tokens;
    payload.draft_state = std::move(commit.draft_state);
    payload.values_per_token = commit.values_per_token;
    if (payload.by_reference()) {  // the connection stays open for the copy's word
      // The decode engine's copier thread waits for the answer (engine/kv_copier.h): a frozen
      // prefill server costs each import at most this, after which its prompt is computed there.
      const auto patience = std::min(idle_timeout, kConfirmTimeout);
      payload.confirm = [socket, patience] { return confirm_copy(socket->fd, patience); };
    }
    return payload;
  }
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

std::optional<KvTransferServer::ByReference> by_reference_source(engine::EngineCore& engine,
                                                                 std::chrono::milliseconds hold_timeout) {
  std::string fingerprint = engine.kv_reference_fingerprint();
  if (fingerprint.empty()) return std::nullopt;
  KvTransferServer::ByReference source;
  source.fingerprint = std::move(fingerprint);
  source.descriptor = engine.kv_reference_descriptor();
  source.block_size = engine.block_size();
  source.reader = [&engine](engine::KvLeaseKey key, size_t from, bool claim) {
    return engine.read_kv_stream(key, from, claim, /*by_reference=*/true);
  };
  source.release_hold = [&engine](engine::KvLeaseKey key, bool copied) { return engine.release_kv_hold(key, copied); };
  source.hold_timeout = hold_timeout;
  return source;
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

KvTransferServer::KvTransferServer(const std::string& host, int port, StreamReader reader, Releaser releaser,
                                   std::chrono::milliseconds io_timeout, Observer observer, int max_pulls,
                                   std::optional<ByReference> by_reference)
    : reader_(std::move(reader)), releaser_(std::move(releaser)), observer_(std::move(observer)),
      io_timeout_(io_timeout), max_pulls_(max_pulls), by_reference_(std::move(by_reference)) {
  if (by_reference_) {
    TACHYON_CHECK(!by_reference_->fingerprint.empty() && by_reference_->block_size > 0 && by_reference_->reader &&
                  by_reference_->release_hold)
        << "internal: an incomplete by-reference KV source";
    fingerprint_hash_ = fingerprint_hash(by_reference_->fingerprint);
  }
  TACHYON_CHECK(max_pulls_ >= 1) << "the KV transfer server needs at least one pull at a time (got " << max_pulls_ << ")";
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  TACHYON_CHECK(wake_fd_ >= 0) << "cannot open the KV transfer server's eventfd: " << std::strerror(errno);
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
    ::close(wake_fd_);
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
  wake();
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

KvPullStats KvTransferServer::pull_stats() const {
  return {in_flight_.load(), peak_in_flight_.load(), refused_.load(), faults_sent_.load()};
}

void KvTransferServer::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd_, &one, sizeof(one));
}

// One thread serves every connection: non-blocking sockets under poll(), each connection a small
// state machine (read the request, then stream frames as the reader yields them), so pulls
// overlap without a thread each. A stream with nothing to send waits for wake() or a heartbeat.
void KvTransferServer::serve() {
  std::vector<Connection> connections;
  std::vector<pollfd> fds;
  while (!stopping_) {
    fds.assign({pollfd{listen_fd_, POLLIN, 0}, pollfd{wake_fd_, POLLIN, 0}});
    for (const Connection& c : connections) {
      const bool writing = c.sent < c.out.size() && c.phase == Phase::kStreaming;
      fds.push_back({c.fd, static_cast<short>(writing ? POLLOUT : POLLIN), 0});
    }
    ::poll(fds.data(), fds.size(), static_cast<int>(kHeartbeatEvery.count() / 2));
    if (fds[1].revents & POLLIN) {
      uint64_t count = 0;
      [[maybe_unused]] const ssize_t n = ::read(wake_fd_, &count, sizeof(count));
    }
    if (fds[0].revents & POLLIN) {
      for (int fd; (fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0;) {
        const auto now = Clock::now();
        connections.push_back({.fd = fd, .start = now, .deadline = now + io_timeout_, .last_frame = now});
      }
    }
    const auto now = Clock::now();
    for (size_t i = 0; i < connections.size(); ++i) {
      Connection& c = connections[i];
      const short events = i + 2 < fds.size() ? fds[i + 2].revents : 0;
      bool done = now >= c.deadline;
      if (!done && c.phase == Phase::kReading && (events & (POLLIN | POLLHUP | POLLERR))) done = read_request(c);
      if (!done && c.phase == Phase::kStreaming) {
        if (c.sent == c.out.size() && (events & (POLLIN | POLLHUP | POLLERR))) {
          char byte;  // the puller sends nothing more: readable means it closed
          const ssize_t n = ::recv(c.fd, &byte, 1, 0);
          done = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) || (events & (POLLHUP | POLLERR));
        }
        if (!done) done = advance_stream(c);
      }
      if (!done && c.phase == Phase::kStalling && (events & (POLLHUP | POLLERR))) done = true;
      if (!done && c.phase == Phase::kAwaitingCopy && (events & (POLLIN | POLLHUP | POLLERR))) done = read_copy_word(c);
      if (done) close_connection(c);
    }
    std::erase_if(connections, [](const Connection& c) { return c.fd < 0; });
  }
  for (Connection& c : connections) close_connection(c);
}

bool KvTransferServer::read_request(Connection& c) {
  uint32_t op = 0;
  if (c.in.size() >= 8) std::memcpy(&op, c.in.data() + 4, 4);
  const size_t wanted = op == kOpFetchByReference ? kReferenceRequestBytes : kRequestBytes;
  char buffer[kReferenceRequestBytes];
  const ssize_t n = ::recv(c.fd, buffer, wanted - c.in.size(), 0);
  if (n <= 0) return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  c.in.append(buffer, static_cast<size_t>(n));
  if (c.in.size() >= 8) std::memcpy(&op, c.in.data() + 4, 4);
  if (c.in.size() < (op == kOpFetchByReference ? kReferenceRequestBytes : kRequestBytes)) return false;
  uint32_t magic = 0;
  std::memcpy(&magic, c.in.data(), 4);
  std::memcpy(&c.key.epoch, c.in.data() + 8, 8);
  std::memcpy(&c.key.request_id, c.in.data() + 16, 8);
  if (magic != kFrameMagic) return true;
  if (op == kOpRelease) {
    releaser_(c.key);
    return true;
  }
  if (op == kOpFetchByReference) {
    uint64_t hash = 0;
    std::memcpy(&hash, c.in.data() + kRequestBytes, 8);
    c.by_reference = by_reference_ && hash == fingerprint_hash_;  // else: rows
  } else if (op != kOpFetch) {
    return true;
  }
  c.phase = Phase::kStreaming;
  if (in_flight_.load() >= max_pulls_) {  // refused at once: the decode side computes the prompt itself
    ++refused_;
    append_frame(c, kStatusError,
                 "the prefill server is sending " + std::to_string(max_pulls_) + " KV pulls (--kv-transfer-max-pulls)");
    c.ended = true;
  }
  return false;
}

// Sends what is queued; once it is out, reads the stream on (new chunks, the commit, or an
// error) or, with nothing new for a while, queues a heartbeat.
bool KvTransferServer::advance_stream(Connection& c) {
  if (c.sent < c.out.size()) return write_frames(c);
  if (c.ended) return true;
  engine::KvStreamRead read;
  try {
    read = c.by_reference ? by_reference_->reader(c.key, c.next_chunk, !c.claimed) : reader_(c.key, c.next_chunk, !c.claimed);
  } catch (const std::exception& e) {
    append_frame(c, kStatusError, e.what());
    c.ended = true;
    return write_frames(c);
  }
  c.claimed = true;
  c.next_chunk += read.chunks.size();
  if (c.by_reference && !c.descriptor_sent) {
    std::string body;
    put_value(body, static_cast<uint64_t>(by_reference_->block_size));
    body += by_reference_->descriptor;
    append_frame(c, kStatusReference, std::move(body));
    c.descriptor_sent = true;
  }
  const int64_t width = read.commit ? read.commit->values_per_token : 0;
  for (const auto& chunk : read.chunks) {
    if (c.by_reference) {
      append_frame(c, kStatusBlocks, encode_kv_block_chunk(*chunk));
    } else {
      const int64_t values_per_token = chunk->num_tokens > 0 ? static_cast<int64_t>(chunk->rows.size()) / chunk->num_tokens : width;
      append_frame(c, kStatusChunk, encode_kv_chunk(*chunk, values_per_token));
    }
    if (c.ended) break;  // a fault cut the stream
  }
  if (read.commit) c.holding = c.by_reference;  // taken: the engine holds the blocks for the copy
  if (read.commit && !c.ended) {
    append_frame(c, kStatusCommit, encode_kv_commit(*read.commit, XXH3_64bits(c.chunk_sums.data(), c.chunk_sums.size())));
    c.committed = !c.ended;  // not cut by a fault
    c.ended = true;
  }
  if (c.out.size() == c.sent && Clock::now() - c.last_frame >= kHeartbeatEvery) append_frame(c, kStatusHeartbeat, "");
  return c.sent < c.out.size() ? write_frames(c) : false;
}

// Queues one frame; the injected fault hits the stream's second rows frame: a corrupted body,
// or half the frame and then a closed connection (truncate) or silence (stall).
void KvTransferServer::append_frame(Connection& c, uint32_t status, std::string body) {
  const uint64_t checksum = XXH3_64bits(body.data(), body.size());
  const bool rows = status == kStatusChunk || status == kStatusBlocks || status == kStatusCommit;
  if (status == kStatusChunk || status == kStatusBlocks) put_value(c.chunk_sums, checksum);
  const KvTransportFault fault = rows && ++c.data_frames == 2 ? fault_.load() : KvTransportFault::kNone;
  if (rows && fault == KvTransportFault::kNone) c.payload_bytes += static_cast<int64_t>(body.size());
  c.faulted = c.faulted || fault != KvTransportFault::kNone;
  c.fault_queued = c.fault_queued || fault != KvTransportFault::kNone;
  if (fault == KvTransportFault::kCorrupt && !body.empty()) body[body.size() / 2] ^= 0x5a;
  const size_t frame_start = c.out.size();
  put_value(c.out, kFrameMagic);
  put_value(c.out, status);
  put_value(c.out, static_cast<uint64_t>(body.size()));
  c.out += body;
  put_value(c.out, checksum);
  if (fault == KvTransportFault::kTruncate || fault == KvTransportFault::kStall) {
    c.out.resize(frame_start + kFrameHead + body.size() / 2);
    c.ended = true;
    c.stall_after = fault == KvTransportFault::kStall;
  }
  if (rows) hold_slot(c, true);
  c.last_frame = Clock::now();
}

bool KvTransferServer::write_frames(Connection& c) {
  const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
  if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  c.sent += static_cast<size_t>(n);
  c.deadline = Clock::now() + io_timeout_;  // progress
  if (c.sent < c.out.size()) return false;
  c.out.clear();
  c.sent = 0;
  if (c.fault_queued) {  // the frames before the faulty one, and what the fault left of it, are out
    c.fault_queued = false;
    ++faults_sent_;
  }
  hold_slot(c, false);  // a stream waiting for its prompt holds no slot
  if (!c.ended) return false;
  if (c.stall_after) {  // silence until the deadline, then a closed connection
    c.phase = Phase::kStalling;
    return false;
  }
  if (observer_ && c.committed && !c.faulted) {
    observer_(c.payload_bytes, std::chrono::duration<double>(Clock::now() - c.start).count());
  }
  if (c.committed && c.holding) {  // the decode side copies now; its word ends the hold
    c.committed = false;
    c.phase = Phase::kAwaitingCopy;
    c.deadline = Clock::now() + by_reference_->hold_timeout;
    c.in.clear();
    return false;
  }
  return true;
}

// The by-reference puller's word after its copy: the hold ends either way; a copy that happened
// while the blocks were still held is confirmed (status 8), anything else closes unconfirmed.
bool KvTransferServer::read_copy_word(Connection& c) {
  char buffer[kCopyWordBytes];
  const ssize_t n = ::recv(c.fd, buffer, kCopyWordBytes - c.in.size(), 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  if (n <= 0) return true;  // closed: close_connection ends the hold
  c.in.append(buffer, static_cast<size_t>(n));
  if (c.in.size() < kCopyWordBytes) return false;
  uint32_t magic = 0, copied = 0;
  std::memcpy(&magic, c.in.data(), 4);
  std::memcpy(&copied, c.in.data() + 4, 4);
  c.holding = false;
  const bool held = by_reference_->release_hold(c.key, magic == kCopyMagic && copied == 1);
  if (!held || magic != kCopyMagic || copied != 1) return true;
  c.phase = Phase::kStreaming;
  append_frame(c, kStatusConfirmed, "");
  return write_frames(c);  // c.ended: closes once sent
}

void KvTransferServer::hold_slot(Connection& c, bool hold) {
  if (c.counted == hold) return;
  c.counted = hold;
  if (hold) {
    peak_in_flight_.store(std::max(peak_in_flight_.load(), ++in_flight_));
  } else {
    --in_flight_;
  }
}

void KvTransferServer::close_connection(Connection& c) {
  if (c.fd < 0) return;
  if (c.holding) {  // a taken by-reference stream whose puller never said it copied
    c.holding = false;
    by_reference_->release_hold(c.key, false);
  }
  ::close(c.fd);
  c.fd = -1;
  hold_slot(c, false);
}

}  // namespace tachyon::server
