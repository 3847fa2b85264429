// FairShares: how much service each client has had, for the fair scheduling policy
// (core/scheduler_config.h SchedulingPolicy::kFair). After virtual token counters (Sheng et al.,
// "Fairness in Serving Large Language Models", OSDI 2024): a client's service is the number of
// tokens planned for its sequences (the step budget's unit: prompt, recomputed, decoded and draft
// tokens alike), and work goes to the client with the least. A client that arrives, or returns
// after a pause, starts at the least service among the clients with work, so that no client
// banks credit while idle and none that was idle is starved by those that were not.
// A client is SamplingParams::client when nonzero (the server's client address and end user),
// else the request alone. Entries exist only while a client has a sequence waiting or running:
// nothing here grows with the clients served.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "tachyon/engine/sequence.h"

namespace tachyon::engine {

class FairShares {
 public:
  // (SamplingParams::client, -1), or (0, request id) for a request that is its own client.
  using Client = std::pair<uint64_t, int64_t>;
  static Client client_of(const Sequence& sequence);

  // Starts a step: forgets clients without a live sequence and enters new ones at the least
  // service of those already entered (0 when there are none).
  void refresh(const std::vector<const Sequence*>& live);
  int64_t service(const Client& client) const;
  int64_t service(const Sequence& sequence) const { return service(client_of(sequence)); }
  void charge(const Sequence& sequence, int64_t tokens) { service_[client_of(sequence)] += tokens; }
  size_t num_clients() const { return service_.size(); }

 private:
  std::map<Client, int64_t> service_;
};

}  // namespace tachyon::engine
