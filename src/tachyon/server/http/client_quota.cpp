#include "tachyon/server/http/client_quota.h"

#include <functional>

#include "tachyon/server/openai_errors.h"

namespace tachyon::server {

uint64_t fair_share_client(std::string_view address, std::string_view user) {
  std::string key(address);
  key.push_back('\0');  // no address and user pair spells another's
  key.append(user);
  const uint64_t hash = std::hash<std::string>{}(key);
  return hash == 0 ? 1 : hash;
}

std::unique_ptr<ClientQuota::Ticket> ClientQuota::acquire(const std::string& client, int64_t sequences) {
  {
    std::lock_guard lock(mutex_);
    int64_t& held = in_flight_[client];
    if (limit_ > 0 && held + sequences > limit_) {
      const int64_t now = held;
      if (held == 0) in_flight_.erase(client);
      throw ApiException({429,
                          "this client has " + std::to_string(now) + " sequences in flight and asked for " +
                              std::to_string(sequences) + " more; the limit per client is " + std::to_string(limit_) +
                              " (--max-sequences-per-client)",
                          "rate_limit_error", "", "too_many_sequences_in_flight"});
    }
    held += sequences;
  }
  return std::make_unique<Ticket>(*this, client, sequences);
}

int64_t ClientQuota::in_flight(const std::string& client) const {
  std::lock_guard lock(mutex_);
  auto it = in_flight_.find(client);
  return it == in_flight_.end() ? 0 : it->second;
}

void ClientQuota::release(const std::string& client, int64_t sequences) {
  std::lock_guard lock(mutex_);
  auto it = in_flight_.find(client);
  if (it == in_flight_.end()) return;
  it->second -= sequences;
  if (it->second <= 0) in_flight_.erase(it);
}

}  // namespace tachyon::server
