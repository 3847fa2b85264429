// DeepSeek sparse attention under decode context parallelism (dcp_layout.h): each rank holds the
// index keys of its own tokens only, so it scores those and keeps its local top-k as (score,
// global position) candidates; ONE all-gather of the candidates per indexer layer gives every
// rank of the DCP group the same lists, and the same merge on every rank picks the same top-k.
//
// Why the merge equals the unsplit indexer exactly: kernels/cpu/dsa_indexer.cpp keeps the top-k of
// a total order, score descending and on equal scores the earlier position first (a stable sort of
// the positions by score); every member of the global top-k of a total order is in the top-k of
// its own rank's share, so the merged candidates contain the global top-k and the same order over
// them selects it, ties included. candidate_before is that order, written once and used for the
// local cut and the merge. The scores themselves are the unsplit kernel's (the same function
// scores the same query against the same key), so equal inputs give equal bits.
// The exchange moves bytes: NaN payloads and denormals arrive bit-identical (tested).
// Tests: tests/unit/test_dcp_merge.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/dist/communicator.h"

namespace tachyon::model {

// One candidate of one query: 8 bytes, exchanged as they are. position -1: no candidate (padding).
struct IndexCandidate {
  float score = 0.0f;
  int32_t position = -1;
};

// The indexer's total order: higher score first, then the earlier position.
inline bool candidate_before(const IndexCandidate& a, const IndexCandidate& b) {
  return a.score > b.score || (a.score == b.score && a.position < b.position);
}

// One query's local cut: scores [count] of the tokens at global `positions` [count] (ascending)
// -> out [topk]: the first min(topk, count) candidates in candidate_before order, then padding.
void local_topk_candidates(std::span<const float> scores, std::span<const int32_t> positions, int64_t topk,
                           IndexCandidate* out);

// One query's merge: gathered [sources * topk] candidates (padding allowed anywhere) -> kept
// [topk]: the positions of the first min(topk, candidates) in candidate_before order, ascending,
// -1 padded (what kernels::cpu::dsa_select_topk writes).
void merge_topk_candidates(std::span<const IndexCandidate> gathered, int64_t topk, int32_t* kept);

// The DCP group's exchange: local [n, topk] -> [group size, n, topk] in rank order, one all_gather.
std::vector<IndexCandidate> exchange_candidates(dist::Communicator& group, std::span<const IndexCandidate> local);

}  // namespace tachyon::model
