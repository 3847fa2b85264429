#include "tachyon/server/http/pd_backends.h"

#include <httplib.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tachyon/base/check.h"
#include "tachyon/server/http/pd_roles.h"

namespace tachyon::server {
namespace {

// The sum of the samples of `name` in a Prometheus text ("name{labels} value" lines).
int64_t sum_samples(const std::string& text, const std::string& name) {
  int64_t sum = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size() || (line[name.size()] != '{' && line[name.size()] != ' ')) {
      continue;
    }
    try {
      sum += static_cast<int64_t>(std::stod(line.substr(line.rfind(' ') + 1)));
    } catch (const std::exception&) {
    }
  }
  return sum;
}

std::unique_ptr<Backend> parse_backend(const std::string& url) {
  std::string rest = url.rfind("http://", 0) == 0 ? url.substr(7) : url;
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const size_t colon = rest.rfind(':');
  TACHYON_CHECK(colon != std::string::npos && colon > 0 && rest.find('/') == std::string::npos)
      << "router backend URL '" << url << "' is not http://host:port";
  auto backend = std::make_unique<Backend>();
  backend->url = url;
  backend->host = rest.substr(0, colon);
  try {
    backend->port = std::stoi(rest.substr(colon + 1));
  } catch (const std::exception&) {
    TACHYON_CHECK(false) << "router backend URL '" << url << "' has no port number";
  }
  return backend;
}

}  // namespace

RoutePolicy parse_route_policy(const std::string& name) {
  if (name == "round-robin") return RoutePolicy::kRoundRobin;
  if (name == "least-loaded") return RoutePolicy::kLeastLoaded;
  if (name == "prefix") return RoutePolicy::kPrefix;
  TACHYON_CHECK(false) << "unknown router policy '" << name << "': round-robin, least-loaded or prefix";
  return RoutePolicy::kRoundRobin;
}

int64_t Backend::cached_prefix_blocks(std::span<const int32_t> prompt) {
  std::lock_guard lock(prefix_mutex_);
  if (block_size_ <= 0 || cached_.empty()) return 0;
  std::vector<engine::BlockHash> hashes;
  engine::extend_block_hashes(hashes, prompt, block_size_);
  int64_t blocks = 0;
  while (blocks < static_cast<int64_t>(hashes.size()) && cached_.count(hashes[static_cast<size_t>(blocks)]) > 0) ++blocks;
  return blocks;
}

void Backend::set_prefix(int32_t block_size, std::unordered_set<engine::BlockHash, engine::BlockHashHasher> hashes) {
  std::lock_guard lock(prefix_mutex_);
  ++scrapes_;
  // Blocks noted since the scrape before this one may be missing from its list: keep them.
  std::erase_if(noted_, [&](const auto& noted) { return noted.second < scrapes_ - 1 || block_size != block_size_; });
  for (const auto& noted : noted_) hashes.insert(noted.first);
  block_size_ = block_size;
  cached_ = std::move(hashes);
  num_prefix_blocks = static_cast<int64_t>(cached_.size());
}

void Backend::note_cached(std::span<const int32_t> prompt) {
  std::lock_guard lock(prefix_mutex_);
  if (block_size_ <= 0) return;  // not scraped yet: the block size is unknown
  std::vector<engine::BlockHash> hashes;
  engine::extend_block_hashes(hashes, prompt, block_size_);
  for (const engine::BlockHash& h : hashes) {
    cached_.insert(h);
    noted_.emplace_back(h, scrapes_);
  }
  num_prefix_blocks = static_cast<int64_t>(cached_.size());
}

BackendGroup::BackendGroup(const std::vector<std::string>& urls) {
  for (const std::string& url : urls) backends_.push_back(parse_backend(url));
}

std::vector<Backend*> BackendGroup::order(RoutePolicy policy, std::span<const int32_t> prompt) {
  const uint64_t start = next_.fetch_add(1);
  std::vector<Backend*> healthy;
  for (size_t i = 0; i < backends_.size(); ++i) {
    Backend* b = backends_[(start + i) % backends_.size()].get();
    if (b->healthy) healthy.push_back(b);
  }
  if (policy == RoutePolicy::kRoundRobin || healthy.size() < 2) return healthy;
  std::vector<std::pair<int64_t, int64_t>> keys;  // (-cached prefix blocks, load) per server
  for (Backend* b : healthy) {
    const int64_t prefix = policy == RoutePolicy::kPrefix && !prompt.empty() ? b->cached_prefix_blocks(prompt) : 0;
    keys.emplace_back(-prefix, b->score());
  }
  std::vector<size_t> index(healthy.size());
  for (size_t i = 0; i < index.size(); ++i) index[i] = i;
  std::stable_sort(index.begin(), index.end(), [&](size_t a, size_t b) { return keys[a] < keys[b]; });
  std::vector<Backend*> ordered;
  for (size_t i : index) ordered.push_back(healthy[i]);
  return ordered;
}

void BackendGroup::refresh(bool load, bool prefix) {
  for (auto& backend : backends_) {
    httplib::Client client(backend->host, backend->port);
    client.set_connection_timeout(std::chrono::seconds(1));
    client.set_read_timeout(std::chrono::seconds(2));
    auto health = client.Get("/health");
    backend->healthy = health && health->status == 200;
    if (!backend->healthy) continue;
    if (load) {
      if (auto metrics = client.Get("/metrics"); metrics && metrics->status == 200) {
        backend->load = sum_samples(metrics->body, "tachyon:num_requests_running") +
                        sum_samples(metrics->body, "tachyon:num_requests_waiting");
      }
    }
    if (prefix) {
      auto published = client.Get(kPrefixHashesPath);
      if (!published || published->status != 200) continue;
      const auto json = nlohmann::json::parse(published->body, nullptr, false);
      if (!json.is_object() || !json.contains("hashes")) continue;
      std::unordered_set<engine::BlockHash, engine::BlockHashHasher> hashes;
      for (const auto& hex : json["hashes"]) {
        const std::string text = hex.is_string() ? hex.get<std::string>() : "";
        if (text.size() != 32) continue;
        hashes.insert({std::stoull(text.substr(16), nullptr, 16), std::stoull(text.substr(0, 16), nullptr, 16)});
      }
      backend->set_prefix(json.value("block_size", 0), std::move(hashes));
    }
  }
}

}  // namespace tachyon::server
