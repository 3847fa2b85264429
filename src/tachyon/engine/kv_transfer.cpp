#include "tachyon/engine/kv_transfer.h"

#include <random>

#include "tachyon/runner/model_runner.h"

namespace tachyon::engine {
namespace {

uint64_t draw_epoch() {
  std::random_device device;
  const uint64_t high = device();
  return (high << 32) ^ device() ^ static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
}

}  // namespace

KvLeases::KvLeases(std::chrono::milliseconds timeout) : epoch_(draw_epoch()), timeout_(timeout) {}

void KvLeases::set_timeout(std::chrono::milliseconds timeout) {
  std::lock_guard lock(mutex_);
  timeout_ = timeout;
}

void KvLeases::expect(int64_t request_id) { expected_.insert(request_id); }

void KvLeases::grant(int64_t request_id, std::vector<int32_t> blocks, std::vector<int32_t> prompt,
                     int32_t first_token, uint64_t seed) {
  expected_.erase(request_id);
  std::lock_guard lock(mutex_);
  Lease lease{std::move(blocks), std::move(prompt), first_token, seed, std::chrono::steady_clock::now() + timeout_};
  leases_[request_id] = std::move(lease);
}

std::vector<std::vector<int32_t>> KvLeases::take_released(std::chrono::steady_clock::time_point now) {
  std::lock_guard lock(mutex_);
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    released_.push_back(std::move(it->second.blocks));
    it = leases_.erase(it);
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
  payload.values_per_token = rows.values_per_token();
  payload.rows.resize(payload.prompt.size() * static_cast<size_t>(payload.values_per_token));
  rows.gather(lease.blocks, static_cast<int64_t>(payload.prompt.size()), payload.rows);
  released_.push_back(std::move(lease.blocks));
  leases_.erase(it);
  return payload;
}

void KvLeases::release(KvLeaseKey key) {
  if (key.epoch != epoch_) return;
  std::lock_guard lock(mutex_);
  auto it = leases_.find(key.request_id);
  if (it == leases_.end()) return;
  released_.push_back(std::move(it->second.blocks));
  leases_.erase(it);
}

int64_t KvLeases::num_leases() {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(leases_.size());
}

}  // namespace tachyon::engine
