#include "tachyon/runner/ucx/ucx_rma.h"

#include <poll.h>

#include <atomic>

#include "tachyon/base/check.h"

namespace tachyon::runner::ucx {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kPeerIdle = std::chrono::minutes(1);  // an unused connection is closed after it
constexpr auto kGracefulClose = std::chrono::seconds(1);

std::string describe(ucs_status_t status) { return ucs_status_string(status); }

// The GETs of one read(): how many are still in flight and whether any failed.
struct Pending {
  std::atomic<int64_t> left{0};
  std::atomic<bool> failed{false};
};

void on_get_done(void* /*request*/, ucs_status_t status, void* user_data) {
  auto* pending = static_cast<Pending*>(user_data);
  if (status != UCS_OK) pending->failed = true;
  pending->left.fetch_sub(1);
}

}  // namespace

struct UcxRma::Peer {
  ucp_ep_h ep = nullptr;
  std::vector<ucp_rkey_h> rkeys;
  std::atomic<bool> failed{false};  // UCX's error handler: the peer died or its connection broke
  Clock::time_point last_used;
};

namespace {

void on_peer_error(void* arg, ucp_ep_h /*ep*/, ucs_status_t /*status*/) {
  static_cast<std::atomic<bool>*>(arg)->store(true);
}

// Waits for a non-blocking operation's request (null or an error: already done).
bool wait_request(ucp_worker_h worker, ucs_status_ptr_t request, Clock::time_point deadline) {
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return true;
  while (ucp_request_check_status(request) == UCS_INPROGRESS) {
    if (Clock::now() > deadline) return false;
    ucp_worker_progress(worker);
  }
  ucp_request_free(request);
  return true;
}

// Closes an endpoint with nothing of ours in flight: flushed when the peer answers within a
// second, by force otherwise (a dead peer).
void close_endpoint(ucp_worker_h worker, ucp_ep_h ep, bool force) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  param.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
  ucs_status_ptr_t request = ucp_ep_close_nbx(ep, &param);
  if (wait_request(worker, request, Clock::now() + kGracefulClose)) return;
  ucp_request_cancel(worker, request);
  wait_request(worker, request, Clock::time_point::max());
  if (!force) close_endpoint(worker, ep, true);
}

}  // namespace

UcxRma::UcxRma() {
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  TACHYON_CHECK(status == UCS_OK) << "UCX: cannot read its configuration: " << describe(status);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  status = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  TACHYON_CHECK(status == UCS_OK) << "UCX: cannot start (ucp_init): " << describe(status);
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_MULTI;  // the progress thread and the reader
  status = ucp_worker_create(context_, &worker_params, &worker_);
  if (status != UCS_OK) {
    ucp_cleanup(context_);
    TACHYON_CHECK(false) << "UCX: cannot create a worker: " << describe(status);
  }
  ucp_address_t* address = nullptr;
  size_t address_bytes = 0;
  status = ucp_worker_get_address(worker_, &address, &address_bytes);
  if (status != UCS_OK) {
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
    TACHYON_CHECK(false) << "UCX: the worker has no address: " << describe(status);
  }
  worker_address_.assign(reinterpret_cast<const char*>(address), address_bytes);
  ucp_worker_release_address(worker_, address);
}

UcxRma::~UcxRma() {
  stopping_ = true;
  if (progress_.joinable()) {
    ucp_worker_signal(worker_);
    progress_.join();
  }
  while (!peers_.empty()) close_peer(std::move(peers_.extract(peers_.begin()).mapped()));
  for (ucp_mem_h region : regions_) ucp_mem_unmap(context_, region);
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
}

std::string UcxRma::expose(void* data, size_t bytes) {
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = data;
  params.length = bytes;
  ucp_mem_h region = nullptr;
  ucs_status_t status = ucp_mem_map(context_, &params, &region);
  TACHYON_CHECK(status == UCS_OK) << "UCX: cannot register " << bytes << " bytes for remote reads: " << describe(status);
  void* packed = nullptr;
  size_t packed_bytes = 0;
  status = ucp_rkey_pack(context_, region, &packed, &packed_bytes);
  if (status != UCS_OK) {
    ucp_mem_unmap(context_, region);
    TACHYON_CHECK(false) << "UCX: cannot pack a remote key: " << describe(status);
  }
  std::string rkey(static_cast<const char*>(packed), packed_bytes);
  ucp_rkey_buffer_release(packed);
  std::lock_guard lock(expose_mutex_);
  regions_.push_back(region);
  if (!progress_.joinable()) progress_ = std::thread([this] { progress_loop(); });
  return rkey;
}

// Answers the reads UCX emulates with messages (TCP, shared memory): progress whenever the
// worker's event fd says there is work, checking every 100 ms whether to stop.
void UcxRma::progress_loop() {
  int fd = -1;
  const bool waits = ucp_worker_get_efd(worker_, &fd) == UCS_OK;
  while (!stopping_) {
    while (ucp_worker_progress(worker_) != 0) {
    }
    if (!waits) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;
    pollfd p{fd, POLLIN, 0};
    ::poll(&p, 1, 100);
  }
}

UcxRma::Peers::iterator UcxRma::peer(const std::string& address, std::span<const std::string> rkeys) {
  const auto now = Clock::now();
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (now - it->second->last_used > kPeerIdle) {
      close_peer(std::move(it->second));
      it = peers_.erase(it);
    } else {
      ++it;
    }
  }
  std::string key = address;
  for (const std::string& rkey : rkeys) key += rkey;
  auto found = peers_.find(key);
  if (found != peers_.end()) return found;

  auto peer = std::make_unique<Peer>();
  ucp_ep_params_t params{};
  params.field_mask =
      UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = on_peer_error;
  params.err_handler.arg = &peer->failed;
  ucs_status_t status = ucp_ep_create(worker_, &params, &peer->ep);
  TACHYON_CHECK(status == UCS_OK) << "UCX: cannot connect to the KV source: " << describe(status);
  for (const std::string& rkey : rkeys) {
    ucp_rkey_h unpacked = nullptr;
    status = ucp_ep_rkey_unpack(peer->ep, rkey.data(), &unpacked);
    if (status != UCS_OK) {
      close_peer(std::move(peer));
      TACHYON_CHECK(false) << "UCX: the KV source's remote key does not unpack: " << describe(status);
    }
    peer->rkeys.push_back(unpacked);
  }
  return peers_.emplace(std::move(key), std::move(peer)).first;
}

void UcxRma::close_peer(std::unique_ptr<Peer> peer) {
  for (ucp_rkey_h rkey : peer->rkeys) ucp_rkey_destroy(rkey);
  close_endpoint(worker_, peer->ep, peer->failed.load());
}

void UcxRma::read(const std::string& peer_address, std::span<const std::string> rkeys, std::span<const Get> gets,
                  std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const Peers::iterator entry = peer(peer_address, rkeys);
  Peer& p = *entry->second;
  p.last_used = Clock::now();
  Pending pending;
  std::vector<ucs_status_ptr_t> requests;
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = on_get_done;
  param.user_data = &pending;
  for (const Get& get : gets) {
    TACHYON_CHECK(get.region >= 0 && static_cast<size_t>(get.region) < p.rkeys.size())
        << "internal: a UCX read of region " << get.region << " of " << p.rkeys.size();
    pending.left.fetch_add(1);  // before the post: another thread's progress may complete it at once
    ucs_status_ptr_t request = ucp_get_nbx(p.ep, get.local, get.bytes, get.remote_address, p.rkeys[get.region], &param);
    if (request == nullptr) {
      pending.left.fetch_sub(1);  // done at once: no callback
    } else if (UCS_PTR_IS_ERR(request)) {
      pending.left.fetch_sub(1);
      pending.failed = true;
      break;
    } else {
      requests.push_back(request);
    }
  }
  while (pending.left.load() > 0 && !pending.failed.load() && !p.failed.load() && Clock::now() < deadline) {
    if (ucp_worker_progress(worker_) == 0) std::this_thread::yield();
  }
  const bool complete = pending.left.load() == 0 && !pending.failed.load() && !p.failed.load();
  std::string why;
  if (!complete) {
    why = p.failed.load() || pending.failed.load() ? "the KV source failed the read (it died or its connection broke)"
                                                   : "the KV source did not answer within " +
                                                         std::to_string(timeout.count()) + " ms";
    // Nothing may land in the caller's memory once it has ours back: the endpoint is closed by
    // force, which completes every GET still in flight (with an error), and we wait for that.
    std::unique_ptr<Peer> owned = std::move(entry->second);
    peers_.erase(entry);
    close_endpoint(worker_, owned->ep, /*force=*/true);
    while (pending.left.load() > 0) ucp_worker_progress(worker_);
    for (ucp_rkey_h rkey : owned->rkeys) ucp_rkey_destroy(rkey);
  }
  for (ucs_status_ptr_t request : requests) ucp_request_free(request);
  if (!complete) throw Error("UCX: " + why);
}

}  // namespace tachyon::runner::ucx
