// PeerPlan: path and chunk choice of the peer collectives; see the header for the trade-off.
#include "tachyon/dist/peer_plan.h"

#include <limits>

#include "tachyon/base/check.h"

namespace tachyon::dist {
namespace {

void check_arguments(int ranks, size_t buffer_bytes) {
  TACHYON_CHECK(ranks >= 1) << "peer plan: a group needs at least one rank, got " << ranks;
  TACHYON_CHECK(buffer_bytes >= kPeerUnitBytes)
      << "peer plan: a buffer of " << buffer_bytes << " bytes is smaller than one " << kPeerUnitBytes
      << "-byte unit; give the PeerWorld a larger buffer";
}

// One chunk when the message fits, else the fallback or capacity-sized chunks.
PeerPlan plan_chunks(size_t bytes, size_t buffer_bytes, bool has_fallback) {
  const size_t capacity = peer_capacity(buffer_bytes);
  if (bytes > capacity && has_fallback) return {.path = PeerPath::kFallback, .chunks = 0, .chunk_bytes = 0};
  const size_t chunk_bytes = bytes > capacity ? capacity : bytes;
  const size_t chunks = bytes == 0 ? 0 : (bytes + chunk_bytes - 1) / chunk_bytes;
  return {.path = PeerPath::kOneShot, .chunks = chunks, .chunk_bytes = chunk_bytes};
}

}  // namespace

std::string_view peer_path_name(PeerPath path) {
  switch (path) {
    case PeerPath::kOneShot:
      return "one-shot";
    case PeerPath::kTwoShot:
      return "two-shot";
    case PeerPath::kFallback:
      return "fallback";
  }
  return "unknown";
}

size_t one_shot_max_bytes(int ranks) {
  if (ranks <= 2) return std::numeric_limits<size_t>::max();
  if (ranks <= 4) return size_t{512} << 10;
  return size_t{256} << 10;
}

size_t peer_capacity(size_t buffer_bytes) { return buffer_bytes / kPeerUnitBytes * kPeerUnitBytes; }

PeerPath all_reduce_path(size_t bytes, int ranks) {
  return bytes <= one_shot_max_bytes(ranks) ? PeerPath::kOneShot : PeerPath::kTwoShot;
}

PeerPlan plan_all_reduce(size_t bytes, int ranks, size_t buffer_bytes, bool has_fallback) {
  check_arguments(ranks, buffer_bytes);
  PeerPlan plan = plan_chunks(bytes, buffer_bytes, has_fallback);
  if (plan.path != PeerPath::kFallback) plan.path = all_reduce_path(plan.chunk_bytes, ranks);
  return plan;
}

PeerPlan plan_all_gather(size_t bytes, int ranks, size_t buffer_bytes, bool has_fallback) {
  check_arguments(ranks, buffer_bytes);
  return plan_chunks(bytes, buffer_bytes, has_fallback);
}

}  // namespace tachyon::dist
