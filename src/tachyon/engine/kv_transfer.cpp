#include "tachyon/engine/kv_transfer.h"

#include <limits>
#include <random>
#include <utility>

#include "tachyon/runner/model_runner.h"

namespace tachyon::engine {
namespace {

uint64_t draw_epoch() {
  std::random_device device;
  const uint64_t high = device();
  return (high << 32) ^ device() ^ static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace

void join_kv_chunks(KvPayload& payload, const std::vector<int64_t>& plane_widths) {
  int64_t width_sum = 0;
  for (int64_t w : plane_widths) width_sum += w;
  const auto num_tokens = static_cast<int64_t>(payload.prompt.size());
  if (width_sum != payload.values_per_token) {
    throw KvTransferError("the KV rows have " + std::to_string(payload.values_per_token) +
                          " values per token; this cache holds " + std::to_string(width_sum) +
                          "; are both servers serving the same model?");
  }
  int64_t next = 0;
  for (const auto& chunk : payload.chunks) {
    if (chunk->begin != next || chunk->num_tokens <= 0 || next + chunk->num_tokens > num_tokens ||
        chunk->rows.size() != static_cast<size_t>(chunk->num_tokens * width_sum)) {
      throw KvTransferError("a KV chunk of tokens [" + std::to_string(chunk->begin) + ", +" +
                            std::to_string(chunk->num_tokens) + ") does not follow token " + std::to_string(next) +
                            " of a " + std::to_string(num_tokens) + "-token prompt");
    }
    next += chunk->num_tokens;
  }
  if (next != num_tokens) {
    throw KvTransferError("the KV chunks cover " + std::to_string(next) + " of " + std::to_string(num_tokens) +
                          " prompt tokens");
  }
  payload.rows.assign(static_cast<size_t>(num_tokens * width_sum), 0.0f);
  float* dst = payload.rows.data();
  size_t plane_offset = 0;  // in a chunk's rows: where this plane starts, per token count
  for (int64_t width : plane_widths) {
    for (const auto& chunk : payload.chunks) {
      const float* src = chunk->rows.data() + plane_offset * static_cast<size_t>(chunk->num_tokens);
      dst = std::copy(src, src + chunk->num_tokens * width, dst);
    }
    plane_offset += static_cast<size_t>(width);
  }
  payload.chunks.clear();
}

std::vector<int32_t> join_kv_block_chunks(const KvPayload& payload, int64_t block_size) {
  const auto num_tokens = static_cast<int64_t>(payload.prompt.size());
  if (block_size <= 0) throw KvTransferError("a by-reference KV payload without a block size");
  std::vector<int32_t> table;
  int64_t next = 0;
  for (const auto& chunk : payload.chunks) {
    const int64_t needed = (chunk->num_tokens + block_size - 1) / block_size;
    if (chunk->begin != next || chunk->begin % block_size != 0 || chunk->num_tokens <= 0 ||
        next + chunk->num_tokens > num_tokens || static_cast<int64_t>(chunk->blocks.size()) != needed) {
      throw KvTransferError("a by-reference KV chunk of tokens [" + std::to_string(chunk->begin) + ", +" +
                            std::to_string(chunk->num_tokens) + ") in " + std::to_string(chunk->blocks.size()) +
                            " blocks does not follow token " + std::to_string(next) + " of a " +
                            std::to_string(num_tokens) + "-token prompt");
    }
    table.insert(table.end(), chunk->blocks.begin(), chunk->blocks.end());
    next += chunk->num_tokens;
  }
  if (next != num_tokens) {
    throw KvTransferError("the KV chunks cover " + std::to_string(next) + " of " + std::to_string(num_tokens) +
                          " prompt tokens");
  }
  return table;
}

KvLeases::KvLeases(std::chrono::milliseconds timeout) : epoch_(draw_epoch()), timeout_(timeout) {
  stats_.max_blocks = std::numeric_limits<int64_t>::max();
}

void KvLeases::set_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard lock(mutex_);
  timeout_ = timeout;
}

void KvLeases::set_max_blocks(int64_t max_blocks) {
  std::lock_guard lock(mutex_);
  stats_.max_blocks = max_blocks;
}

void KvLeases::reserve(int64_t num_blocks) {
  std::lock_guard lock(mutex_);
  if (stats_.blocks > 0 && stats_.blocks + num_blocks > stats_.max_blocks) {
    ++stats_.refused;
    throw KvLeasesFullError("this prefill server holds " + std::to_string(stats_.blocks) +
                            " KV blocks for decode servers to pull (its cap is " + std::to_string(stats_.max_blocks) +
                            "); retry later");
  }
  stats_.blocks += num_blocks;
}

void KvLeases::unreserve(int64_t num_blocks) {
  std::lock_guard lock(mutex_);
  stats_.blocks -= num_blocks;
}

void KvLeases::expect(int64_t request_id, int64_t num_blocks) {
  std::lock_guard lock(mutex_);
  expected_[request_id] = num_blocks;
  num_expected_ = static_cast<int64_t>(expected_.size());
  streams_[request_id] = Stream{};
}

bool KvLeases::expected(int64_t request_id) {
  if (num_expected_.load() == 0) return false;
  std::lock_guard lock(mutex_);
  return expected_.count(request_id) > 0;
}

void KvLeases::forget(int64_t request_id) {
  if (num_expected_.load() == 0) return;
  std::lock_guard lock(mutex_);
  auto it = expected_.find(request_id);
  if (it == expected_.end()) return;
  stats_.blocks -= it->second;
  expected_.erase(it);
  num_expected_ = static_cast<int64_t>(expected_.size());
  cancelled_.erase(request_id);
  end_stream(request_id);  // never granted: a pull of it ends with an error
}

void KvLeases::end_stream(int64_t request_id) {
  auto it = streams_.find(request_id);
  if (it == streams_.end()) return;
  release_pins(it->second);
  streams_.erase(it);
}

void KvLeases::grant(int64_t request_id, std::vector<int32_t> blocks, std::vector<int32_t> prompt,
                     int32_t first_token, uint64_t seed, int64_t cached_tokens, std::string draft_state) {
  grant_locked(request_id, std::move(blocks), std::move(prompt), first_token, seed, cached_tokens,
               std::move(draft_state));
  notify();
}

void KvLeases::grant_locked(int64_t request_id, std::vector<int32_t> blocks, std::vector<int32_t> prompt,
                            int32_t first_token, uint64_t seed, int64_t cached_tokens, std::string draft_state) {
  std::lock_guard lock(mutex_);
  auto expected = expected_.find(request_id);
  const int64_t reserved = expected != expected_.end() ? expected->second : 0;
  if (expected != expected_.end()) expected_.erase(expected);
  num_expected_ = static_cast<int64_t>(expected_.size());
  stats_.blocks += static_cast<int64_t>(blocks.size()) - reserved;
  ++stats_.granted;
  Lease lease{std::move(blocks), std::move(prompt), first_token, seed,
              std::chrono::steady_clock::now() + timeout_, std::move(draft_state), cached_tokens};
  auto it = leases_.insert_or_assign(request_id, std::move(lease)).first;
  ++stats_.outstanding;
  if (cancelled_.erase(request_id) > 0) {
    ++stats_.released;
    drop(it);
  }
}

void KvLeases::drop(std::unordered_map<int64_t, Lease>::iterator it) {
  stats_.blocks -= static_cast<int64_t>(it->second.blocks.size());
  --stats_.outstanding;
  released_.push_back(std::move(it->second.blocks));
  end_stream(it->first);
  leases_.erase(it);
}

std::vector<std::vector<int32_t>> KvLeases::take_released(std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mutex_);
  for (auto it = leases_.begin(); it != leases_.end();) {
    auto next = std::next(it);
    if (it->second.deadline <= now) {
      ++stats_.expired;
      drop(it);
    }
    it = next;
  }
  for (auto it = holds_.begin(); it != holds_.end();) {
    if (it->second.deadline <= now) {
      release_pins(it->second.stream);
      it = holds_.erase(it);
    } else {
      ++it;
    }
  }
  return std::exchange(released_, {});
}

KvPayload KvLeases::export_rows(KvLeaseKey key, const runner::KvRowAccess& rows) {
  std::lock_guard lock(mutex_);
  auto it = key.epoch == epoch_ ? leases_.find(key.request_id) : leases_.end();
  if (it == leases_.end() || it->second.deadline <= std::chrono::steady_clock::now()) {
    throw KvTransferError("no KV lease " + std::to_string(key.request_id) + " of epoch " + std::to_string(key.epoch) +
                          " on this server (never granted, already taken, expired, or the server restarted)");
  }
  Lease& lease = it->second;
  KvPayload payload;
  payload.prompt = std::move(lease.prompt);
  payload.first_token = lease.first_token;
  payload.seed = lease.seed;
  payload.cached_tokens = lease.cached_tokens;
  payload.draft_state = std::move(lease.draft_state);
  payload.values_per_token = rows.values_per_token();
  payload.rows.resize(payload.prompt.size() * static_cast<size_t>(payload.values_per_token));
  rows.gather(lease.blocks, static_cast<int64_t>(payload.prompt.size()), payload.rows);
  ++stats_.exported;
  drop(it);
  return payload;
}

void KvLeases::release(KvLeaseKey key) {
  if (key.epoch != epoch_) return;
  std::lock_guard lock(mutex_);
  auto it = leases_.find(key.request_id);
  if (it != leases_.end()) {
    ++stats_.released;
    drop(it);
  } else if (expected_.count(key.request_id) > 0) {
    cancelled_.insert(key.request_id);  // the prompt is still running: released as it is granted
  }
}

void KvLeases::set_listener(std::function<void()> listener) {
  std::lock_guard lock(listener_mutex_);
  listener_ = std::move(listener);
}

void KvLeases::notify() {
  std::lock_guard lock(listener_mutex_);
  if (listener_) listener_();
}

int64_t KvLeases::staged_tokens(int64_t request_id) {
  std::lock_guard lock(mutex_);
  auto it = streams_.find(request_id);
  return it != streams_.end() ? it->second.staged_tokens : 0;
}

void KvLeases::stage(int64_t request_id, int64_t begin, int64_t num_tokens, std::vector<int32_t> blocks) {
  {
    std::lock_guard lock(mutex_);
    auto it = streams_.find(request_id);
    if (it == streams_.end() || num_tokens <= 0) {
      released_.push_back(std::move(blocks));  // nobody will read them: the pins go back
      return;
    }
    TACHYON_CHECK(begin == it->second.staged_tokens)
        << "KV rows staged out of order: " << begin << " after " << it->second.staged_tokens;
    it->second.staged_tokens += num_tokens;
    it->second.chunks.push_back({begin, num_tokens, std::move(blocks)});
  }
  notify();
}

KvStreamRead KvLeases::read_stream(KvLeaseKey key, size_t from, bool claim, const runner::KvRowAccess& rows,
                                   bool by_reference) {
  std::lock_guard lock(mutex_);
  auto stream = key.epoch == epoch_ ? streams_.find(key.request_id) : streams_.end();
  auto lease = key.epoch == epoch_ ? leases_.find(key.request_id) : leases_.end();
  const bool expired = lease != leases_.end() && lease->second.deadline <= std::chrono::steady_clock::now();
  if (stream == streams_.end() || expired) {
    throw KvTransferError("no KV lease " + std::to_string(key.request_id) + " of epoch " + std::to_string(key.epoch) +
                          " on this server (never granted, already taken, expired, aborted, or the server restarted)");
  }
  if (claim && stream->second.claimed) {
    throw KvTransferError("the KV lease " + std::to_string(key.request_id) + " is already being pulled");
  }
  stream->second.claimed = true;
  KvStreamRead read;
  const auto& chunks = stream->second.chunks;
  for (size_t i = from; i < chunks.size(); ++i) {
    auto chunk = std::make_shared<KvChunk>();
    chunk->begin = chunks[i].begin;
    chunk->num_tokens = chunks[i].num_tokens;
    if (by_reference) {
      chunk->blocks = chunks[i].blocks;
    } else {
      chunk->rows.resize(static_cast<size_t>(chunk->num_tokens * rows.values_per_token()));
      rows.gather(chunks[i].blocks, chunk->num_tokens, chunk->rows);
    }
    read.chunks.push_back(std::move(chunk));
  }
  if (lease == leases_.end()) {  // the prompt still runs: these rows go out before it finishes
    for (const auto& chunk : read.chunks) stats_.early_tokens += chunk->num_tokens;
    return read;
  }
  // Granted, and every chunk is out with this read: the commit takes the lease.
  KvCommit commit;
  commit.prompt = std::move(lease->second.prompt);
  commit.first_token = lease->second.first_token;
  commit.seed = lease->second.seed;
  commit.cached_tokens = lease->second.cached_tokens;
  commit.draft_state = std::move(lease->second.draft_state);
  commit.values_per_token = rows.values_per_token();
  commit.num_chunks = static_cast<int64_t>(chunks.size());
  read.commit = std::move(commit);
  ++stats_.exported;
  if (by_reference) {  // the pins stay until the reader's copy is confirmed (release_hold)
    holds_[key.request_id] = {std::move(stream->second), std::chrono::steady_clock::now() + timeout_};
    streams_.erase(stream);
  }
  drop(lease);
  return read;
}

bool KvLeases::release_hold(KvLeaseKey key, bool copied) {
  if (key.epoch != epoch_) return false;
  std::lock_guard lock(mutex_);
  auto it = holds_.find(key.request_id);
  if (it == holds_.end()) return false;
  release_pins(it->second.stream);
  holds_.erase(it);
  if (copied) ++stats_.copies_confirmed;
  return true;
}

int64_t KvLeases::num_leases() {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(leases_.size());
}

KvLeaseStats KvLeases::stats() {
  std::lock_guard lock(mutex_);
  KvLeaseStats stats = stats_;
  stats.held_for_copy = static_cast<int64_t>(holds_.size());
  return stats;
}

void KvLeases::release_pins(Stream& stream) {
  for (StagedChunk& chunk : stream.chunks) released_.push_back(std::move(chunk.blocks));
  stream.chunks.clear();
}

}  // namespace tachyon::engine
