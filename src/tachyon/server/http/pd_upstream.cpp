#include "tachyon/server/http/pd_upstream.h"

#include <httplib.h>

#include <strings.h>

namespace tachyon::server {

void UpstreamCalls::cancel_all() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
  for (UpstreamCall* call : calls_) call->cancel();
}

bool UpstreamCalls::add(UpstreamCall* call) {
  std::lock_guard lock(mutex_);
  if (cancelled_) return false;
  calls_.insert(call);
  return true;
}

void UpstreamCalls::remove(UpstreamCall* call) {
  std::lock_guard lock(mutex_);
  calls_.erase(call);
}

UpstreamCall::UpstreamCall(UpstreamRequest request) : max_held_(request.max_held) {
  client_ = std::make_unique<httplib::Client>(request.host, request.port);
  client_->set_connection_timeout(std::chrono::seconds(2));
  client_->set_read_timeout(request.read_timeout);
  client_->set_write_timeout(std::chrono::seconds(10));
  if (request.calls != nullptr) {
    if (!request.calls->add(this)) {
      fail_at_start();
      return;
    }
    calls_ = request.calls;
  }
  thread_ = std::thread([this, request = std::move(request)]() mutable { run(std::move(request)); });
}

UpstreamCall::~UpstreamCall() {
  if (calls_ != nullptr) calls_->remove(this);  // first: cancel_all() never reaches a call being destroyed
  cancel();
  if (thread_.joinable()) thread_.join();
  count_held(-static_cast<int64_t>(pending_.size()));  // never taken
}

void UpstreamCall::count_held(int64_t bytes) {
  if (calls_ != nullptr && bytes != 0) calls_->held_bytes_ += bytes;
}

// Holds the bytes for take(); past max_held_ waits until they are taken (or the call is
// cancelled), so that the upstream socket is not read meanwhile.
bool UpstreamCall::receive(const char* data, size_t size) {
  std::function<void()> wakeup;
  {
    std::lock_guard lock(mutex_);
    if (cancelled_) return false;
    pending_.append(data, size);
    count_held(static_cast<int64_t>(size));
    wakeup = wakeup_;
    changed_.notify_all();
  }
  if (wakeup) wakeup();
  std::unique_lock lock(mutex_);
  const auto room = [this] { return cancelled_ || whole_ || pending_.size() < max_held_; };
  if (max_held_ > 0 && !room()) {
    if (calls_ != nullptr) ++calls_->paused_reads_;
    changed_.wait(lock, room);
    if (calls_ != nullptr) --calls_->paused_reads_;
  }
  return !cancelled_;
}

// The router is stopping: the call ends before it begins, as one refused would.
void UpstreamCall::fail_at_start() {
  std::lock_guard lock(mutex_);
  head_ = true;
  done_ = true;
  failed_ = true;
}

void UpstreamCall::run(UpstreamRequest request) {
  httplib::Request upstream;
  upstream.method = request.method;
  upstream.path = request.path;
  upstream.body = std::move(request.body);
  for (const auto& [name, value] : request.headers) upstream.set_header(name, value);
  if (request.method == "POST") upstream.set_header("Content-Type", "application/json");
  upstream.response_handler = [this](const httplib::Response& response) {
    std::lock_guard lock(mutex_);
    status_ = response.status;
    for (const auto& [name, value] : response.headers) response_headers_.emplace_back(name, value);
    head_ = true;
    changed_.notify_all();
    return !cancelled_;
  };
  upstream.content_receiver = [this](const char* data, size_t size, uint64_t, uint64_t) {
    return receive(data, size);
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  const bool ok = client_->send(upstream, response, error);
  std::function<void()> wakeup;
  {
    std::lock_guard lock(mutex_);
    if (!head_) status_ = 0;
    head_ = true;
    done_ = true;
    failed_ = !ok || cancelled_;
    wakeup = wakeup_;
    changed_.notify_all();
  }
  if (wakeup) wakeup();
}

int UpstreamCall::wait_head() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return head_; });
  return status_;
}

std::string UpstreamCall::header(const std::string& name) const {
  std::lock_guard lock(mutex_);
  for (const auto& [key, value] : response_headers_) {
    if (::strcasecmp(key.c_str(), name.c_str()) == 0) return value;
  }
  return "";
}

std::string UpstreamCall::wait_body() {
  std::unique_lock lock(mutex_);
  whole_ = true;
  changed_.notify_all();  // a read paused at the bound goes on
  changed_.wait(lock, [&] { return done_; });
  count_held(-static_cast<int64_t>(pending_.size()));
  return std::exchange(pending_, {});
}

bool UpstreamCall::take(std::string& out) {
  std::lock_guard lock(mutex_);
  out += pending_;
  count_held(-static_cast<int64_t>(pending_.size()));
  pending_.clear();
  changed_.notify_all();  // a read paused at the bound goes on
  return done_;
}

bool UpstreamCall::failed() const {
  std::lock_guard lock(mutex_);
  return failed_;
}

void UpstreamCall::set_wakeup(std::function<void()> wakeup) {
  std::lock_guard lock(mutex_);
  wakeup_ = std::move(wakeup);
}

void UpstreamCall::cancel() {
  {
    std::lock_guard lock(mutex_);
    if (done_ || cancelled_) return;
    cancelled_ = true;
    changed_.notify_all();  // a read paused at the bound ends
  }
  client_->stop();  // a read blocked on the socket fails now
}

}  // namespace tachyon::server
