#include "tachyon/engine/fair_shares.h"

#include <algorithm>
#include <limits>

namespace tachyon::engine {

FairShares::Client FairShares::client_of(const Sequence& sequence) {
  const uint64_t client = sequence.params->client;
  return client != 0 ? Client{client, -1} : Client{0, sequence.request_id};
}

void FairShares::join(Sequence& sequence) {
  if (sequence.fair_share != nullptr) return;
  auto [it, added] = shares_.try_emplace(client_of(sequence));
  if (added) {  // O(clients) once per client's arrival, not per step
    int64_t least = std::numeric_limits<int64_t>::max();
    for (const auto& [client, share] : shares_) {
      if (&share != &it->second) least = std::min(least, share.service);
    }
    it->second.service = least == std::numeric_limits<int64_t>::max() ? 0 : least;
  }
  ++it->second.live;
  sequence.fair_share = &it->second;
}

void FairShares::leave(Sequence& sequence) {
  if (sequence.fair_share == nullptr) return;
  sequence.fair_share = nullptr;
  auto it = shares_.find(client_of(sequence));
  if (it != shares_.end() && --it->second.live == 0) shares_.erase(it);
}

}  // namespace tachyon::engine
