// The responses a server keeps for the Responses API's previous_response_id,
// GET / DELETE /v1/responses/{id} and GET /v1/responses/{id}/input_items: each response object,
// the conversation items it ends (its input, with the items of the responses it continued, then
// its output) and its own input items, as JSON text, at most
// `capacity_bytes` of it together: the least recently used go first, so a server that keeps every
// response (store defaults to true) keeps its memory flat. Kept in memory, per server: a restart
// forgets them. Thread-safe.
#pragma once

#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace tachyon::server {

class ResponsesStore {
 public:
  static constexpr size_t kEntryOverhead = 256;
  struct Entry {
    std::string response;     // the response object
    std::string items;        // the conversation's items, a JSON array
    std::string input_items;  // the response's own input items (with ids), a JSON array
    // Counted with the id and the list and index nodes (kEntryOverhead), so that many small
    // responses stay within the capacity too.
    size_t bytes() const { return response.size() + items.size() + input_items.size() + kEntryOverhead; }
  };

  explicit ResponsesStore(size_t capacity_bytes) : capacity_(capacity_bytes) {}

  // Keeps the entry (replacing one of the same id), dropping the least recently used until the
  // total fits; an entry larger than the capacity is not kept.
  void put(const std::string& id, Entry entry);
  std::optional<Entry> get(const std::string& id);  // and marks it used
  bool remove(const std::string& id);
  size_t bytes() const;
  size_t size() const;

 private:
  using Order = std::list<std::pair<std::string, Entry>>;  // most recently used first
  mutable std::mutex mutex_;
  const size_t capacity_;
  size_t bytes_ = 0;
  Order order_;
  std::unordered_map<std::string, Order::iterator> index_;
};

}  // namespace tachyon::server
