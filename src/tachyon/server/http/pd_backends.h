// The servers behind the router (http/pd_router.h), one group per role: their health and load,
// refreshed by the router's health thread, and the order in which a request tries them.
//   round-robin:  healthy servers in turn;
//   least-loaded: fewest sequences (running + waiting at the last scrape of their /metrics, plus
//                 the requests this router has open on them), ties in turn;
//   prefix:       (prefill servers) the server whose published prefix cache (GET
//                 /kv/prefix_hashes: its cached blocks' chained hashes) holds the longest prefix
//                 of the request's prompt, ties to the least loaded.
// The order also lists the servers to retry on, so a server that fails before answering costs a
// retry, not the request.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "tachyon/engine/kv_cache_manager.h"

namespace tachyon::server {

enum class RoutePolicy { kRoundRobin, kLeastLoaded, kPrefix };
RoutePolicy parse_route_policy(const std::string& name);  // throws Error naming the choices

struct Backend {
  std::string url;  // as given: http://host:port
  std::string host;
  int port = 0;
  std::atomic<bool> healthy{true};
  std::atomic<int64_t> in_flight{0};  // requests this router has open on it
  std::atomic<int64_t> load{0};       // running + waiting sequences at the last scrape
  std::atomic<int64_t> num_prefix_blocks{0};  // published prefix blocks at the last scrape

  int64_t score() const { return load.load() + in_flight.load(); }
  // Full blocks of `prompt` (its leading ones) that the server has cached, as last published.
  int64_t cached_prefix_blocks(std::span<const int32_t> prompt);
  void set_prefix(int32_t block_size, std::unordered_set<engine::BlockHash, engine::BlockHashHasher> hashes);
  // The router just had `prompt` computed here, so its full blocks are in this server's cache:
  // counted at once, not a scrape or two later. A scrape answers with what the server published
  // when the scrape before asked, so a noted block is kept through the next scrape and from then
  // on stands or falls with the server's own list (which drops what it evicted).
  void note_cached(std::span<const int32_t> prompt);

 private:
  std::mutex prefix_mutex_;
  int32_t block_size_ = 0;
  std::unordered_set<engine::BlockHash, engine::BlockHashHasher> cached_;
  int64_t scrapes_ = 0;  // set_prefix calls so far
  std::vector<std::pair<engine::BlockHash, int64_t>> noted_;  // (block, scrapes_ when noted)
};

class BackendGroup {
 public:
  explicit BackendGroup(const std::vector<std::string>& urls);  // throws Error on a malformed URL
  // The healthy servers in the order to try them. `prompt`: the request's tokens, for the
  // prefix policy (empty: none known).
  std::vector<Backend*> order(RoutePolicy policy, std::span<const int32_t> prompt = {});
  const std::vector<std::unique_ptr<Backend>>& backends() const { return backends_; }
  // One scrape of every server: /health, and with `load` its /metrics, with `prefix` its
  // /kv/prefix_hashes.
  void refresh(bool load, bool prefix);

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace tachyon::server
