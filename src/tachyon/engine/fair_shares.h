// FairShares: how much service each client has had, for the fair scheduling policy
// (core/scheduler_config.h SchedulingPolicy::kFair). After virtual token counters (Sheng et al.,
// "Fairness in Serving Large Language Models", OSDI 2024): a client's service is the number of
// tokens planned for its sequences (the step budget's unit: prompt, recomputed, decoded and draft
// tokens alike), and work goes to the client with the least. A client that arrives, or returns
// after a pause, starts at the least service among the clients with work, so that no client
// banks credit while idle and none that was idle is starved by those that were not.
// A client is SamplingParams::client when nonzero (the server's client address and end user),
// else the request alone. A client has an entry while it has a sequence waiting or running (the
// scheduler joins a sequence when it first waits and makes it leave when it finishes): nothing
// here grows with the clients served, and nothing is rebuilt per step.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>

#include "tachyon/engine/sequence.h"

namespace tachyon::engine {

// One client's entry. Node-stable (an unordered_map's value): sequences point at it.
struct FairShare {
  int64_t service = 0;
  int64_t live = 0;  // its sequences that joined and have not left
  // Scratch for one pass of the scheduler over its sequences (Scheduler::start_fair_step,
  // schedule_fair_prefills): the pass's stamp once the client was seen in it, and then `slot`, its
  // index in that pass's work list; grouping by client needs no lookup.
  uint64_t stamp = 0;
  size_t slot = 0;
};

class FairShares {
 public:
  // (SamplingParams::client, -1), or (0, request id) for a request that is its own client.
  using Client = std::pair<uint64_t, int64_t>;
  struct ClientHash {
    size_t operator()(const Client& c) const { return std::hash<uint64_t>{}(c.first * 0x9e3779b97f4a7c15ull ^ c.second); }
  };
  static Client client_of(const Sequence& sequence);

  // Once per sequence, when it first waits (forks and imports included); a client new to the
  // shares starts at the least service of those with an entry (0 when there are none).
  void join(Sequence& sequence);
  // When it finishes (or is aborted); its client's entry goes with its last sequence.
  void leave(Sequence& sequence);
  static int64_t service(const Sequence& sequence) {
    return sequence.fair_share == nullptr ? 0 : sequence.fair_share->service;
  }
  static void charge(const Sequence& sequence, int64_t tokens) {
    if (sequence.fair_share != nullptr) sequence.fair_share->service += tokens;
  }
  size_t num_clients() const { return shares_.size(); }

 private:
  std::unordered_map<Client, FairShare, ClientHash> shares_;
};

}  // namespace tachyon::engine
