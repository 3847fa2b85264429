#include "tachyon/server/responses_store.h"

namespace tachyon::server {

void ResponsesStore::put(const std::string& id, Entry entry) {
  std::lock_guard lock(mutex_);
  if (const auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->second.bytes();
    order_.erase(it->second);
    index_.erase(it);
  }
  if (entry.bytes() > capacity_) return;
  while (bytes_ + entry.bytes() > capacity_) {
    bytes_ -= order_.back().second.bytes();
    index_.erase(order_.back().first);
    order_.pop_back();
  }
  bytes_ += entry.bytes();
  order_.emplace_front(id, std::move(entry));
  index_[id] = order_.begin();
}

std::optional<ResponsesStore::Entry> ResponsesStore::get(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  order_.splice(order_.begin(), order_, it->second);
  return it->second->second;
}

bool ResponsesStore::remove(const std::string& id) {
  std::lock_guard lock(mutex_);
  const auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->second.bytes();
  order_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponsesStore::bytes() const {
  std::lock_guard lock(mutex_);
  return bytes_;
}

size_t ResponsesStore::size() const {
  std::lock_guard lock(mutex_);
  return order_.size();
}

}  // namespace tachyon::server
