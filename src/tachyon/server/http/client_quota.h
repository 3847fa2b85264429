// ClientQuota: how many sequences (prompts x n) each client address has in flight, so that one
// client cannot fill the engine's waiting queue and lock everyone else out with 503s. A request
// that would take its client past the limit is refused with 429 and Retry-After; the share comes
// back when the request's answer is done or abandoned (the Ticket goes). Entries exist only
// while a client has something in flight, so the map never grows with clients served.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tachyon::server {

// The scheduler's fair-share key (SamplingParams::client) of a request: its client address and,
// when the body names one, its end user (a gateway forwarding many users gives each its share).
// Never 0 (0 means "a share of its own" to the engine).
uint64_t fair_share_client(std::string_view address, std::string_view user);

class ClientQuota {
 public:
  // limit <= 0: no limit.
  explicit ClientQuota(int64_t limit) : limit_(limit) {}

  // Holds `sequences` of one client's share until destroyed.
  class Ticket {
   public:
    Ticket(ClientQuota& quota, std::string client, int64_t sequences)
        : quota_(quota), client_(std::move(client)), sequences_(sequences) {}
    ~Ticket() { quota_.release(client_, sequences_); }
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;

   private:
    ClientQuota& quota_;
    std::string client_;
    int64_t sequences_;
  };

  // A ticket, or throws ApiException 429 naming the limit.
  std::unique_ptr<Ticket> acquire(const std::string& client, int64_t sequences);
  int64_t limit() const { return limit_; }
  int64_t in_flight(const std::string& client) const;

 private:
  void release(const std::string& client, int64_t sequences);

  const int64_t limit_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, int64_t> in_flight_;
};

}  // namespace tachyon::server
