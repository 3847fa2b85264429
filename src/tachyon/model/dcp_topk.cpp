// DCP's top-k candidates: the local cut, the exchange and the merge (see dcp_topk.h).
#include "tachyon/model/dcp_topk.h"

#include <algorithm>

#include "tachyon/base/check.h"

namespace tachyon::model {

void local_topk_candidates(std::span<const float> scores, std::span<const int32_t> positions, int64_t topk,
                           IndexCandidate* out) {
  TACHYON_CHECK(scores.size() == positions.size())
      << "local_topk_candidates: " << scores.size() << " scores for " << positions.size() << " positions";
  std::vector<IndexCandidate> all(scores.size());
  for (size_t i = 0; i < scores.size(); ++i) all[i] = {scores[i], positions[i]};
  const size_t count = std::min(all.size(), static_cast<size_t>(topk));
  std::partial_sort(all.begin(), all.begin() + static_cast<long>(count), all.end(), candidate_before);
  std::fill(out, out + topk, IndexCandidate{});
  std::copy_n(all.begin(), count, out);
}

void merge_topk_candidates(std::span<const IndexCandidate> gathered, int64_t topk, int32_t* kept) {
  std::vector<IndexCandidate> valid;
  for (const IndexCandidate& c : gathered) {
    if (c.position >= 0) valid.push_back(c);
  }
  const size_t count = std::min(valid.size(), static_cast<size_t>(topk));
  std::partial_sort(valid.begin(), valid.begin() + static_cast<long>(count), valid.end(), candidate_before);
  std::fill(kept, kept + topk, -1);
  for (size_t i = 0; i < count; ++i) kept[i] = valid[i].position;
  std::sort(kept, kept + count);  // ascending, as the unsplit indexer lists them
}

std::vector<IndexCandidate> exchange_candidates(dist::Communicator& group, std::span<const IndexCandidate> local) {
  static_assert(sizeof(IndexCandidate) == 8, "candidates travel as 8 bytes each");
  std::vector<IndexCandidate> gathered(local.size() * static_cast<size_t>(group.size()));
  group.all_gather(local.data(), gathered.data(), local.size_bytes(), nullptr);
  return gathered;
}

}  // namespace tachyon::model
