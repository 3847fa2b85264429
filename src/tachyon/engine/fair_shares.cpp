#include "tachyon/engine/fair_shares.h"

#include <algorithm>
#include <limits>

namespace tachyon::engine {

FairShares::Client FairShares::client_of(const Sequence& sequence) {
  const uint64_t client = sequence.params->client;
  return client != 0 ? Client{client, -1} : Client{0, sequence.request_id};
}

void FairShares::refresh(const std::vector<const Sequence*>& live) {
  std::map<Client, int64_t> next;
  for (const Sequence* s : live) next.emplace(client_of(*s), -1);
  int64_t least = std::numeric_limits<int64_t>::max();
  for (auto& [client, service] : next) {
    auto it = service_.find(client);
    if (it == service_.end()) continue;
    service = it->second;
    least = std::min(least, service);
  }
  if (least == std::numeric_limits<int64_t>::max()) least = 0;
  for (auto& [client, service] : next) {
    if (service < 0) service = least;
  }
  service_.swap(next);
}

int64_t FairShares::service(const Client& client) const {
  auto it = service_.find(client);
  return it == service_.end() ? 0 : it->second;
}

}  // namespace tachyon::engine
