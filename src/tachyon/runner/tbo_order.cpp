// Vector clocks over one rank's TBO trace (see tbo_order.h).
#include "tachyon/runner/tbo_order.h"

#include <algorithm>
#include <array>
#include <map>

namespace tachyon::runner {
namespace {

constexpr int kStreams = 2;
using Clock = std::array<int64_t, kStreams>;  // [stream] how many ops of that stream are known

const char* stream_name(int s) { return s == 0 ? "compute" : "comm"; }

struct Access {
  int stream = 0;
  int64_t tick = 0;  // the stream's own clock at this access
  bool write = false;
  const TboOp* op = nullptr;
};

}  // namespace

void TboTrace::add(TboOp op) {
  std::lock_guard<std::mutex> lock(mutex_);
  ops_.push_back(std::move(op));
}

std::vector<TboOp> TboTrace::ops() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ops_;
}

std::string check_happens_before(std::span<const TboOp> ops) {
  std::array<Clock, kStreams> clock{};         // [stream] what that stream knows of each stream
  std::map<int, Clock> events;                 // event -> the recording stream's clock
  std::map<int, std::vector<Access>> history;  // buffer -> its accesses so far
  for (const TboOp& op : ops) {
    const int s = static_cast<int>(op.stream);
    Clock& mine = clock[static_cast<size_t>(s)];
    ++mine[static_cast<size_t>(s)];
    switch (op.access) {
      case TboAccess::kRecord:
        events[op.event] = mine;
        break;
      case TboAccess::kWait: {
        const auto it = events.find(op.event);
        if (it == events.end()) {
          return std::string("the ") + stream_name(s) + " stream waits on event " + std::to_string(op.event) +
                 " before any stream records it (" + op.what + ")";
        }
        for (int t = 0; t < kStreams; ++t) mine[t] = std::max(mine[t], it->second[t]);
        break;
      }
      case TboAccess::kRead:
      case TboAccess::kWrite: {
        const bool write = op.access == TboAccess::kWrite;
        std::vector<Access>& seen = history[op.buffer];
        for (const Access& earlier : seen) {
          if (earlier.stream == s || !(earlier.write || write)) continue;
          if (mine[static_cast<size_t>(earlier.stream)] >= earlier.tick) continue;  // ordered by a wait
          return std::string("buffer ") + std::to_string(op.buffer) + ": the " + stream_name(s) + " stream's " +
                 (write ? "write" : "read") + " (" + op.what + ") is not ordered after the " +
                 stream_name(earlier.stream) + " stream's " + (earlier.write ? "write" : "read") + " (" +
                 earlier.op->what + "): no wait on an event recorded after it";
        }
        seen.push_back({s, mine[static_cast<size_t>(s)], write, &op});
        break;
      }
    }
  }
  return "";
}

}  // namespace tachyon::runner
