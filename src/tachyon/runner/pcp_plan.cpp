// The dual-chunk split of a step over a PCP group (see pcp_plan.h).
#include "tachyon/runner/pcp_plan.h"

#include <algorithm>
#include <unordered_map>

#include "tachyon/base/check.h"

namespace tachyon::runner {

PcpPlan build_pcp_plan(const core::StepPlan& plan, int size) {
  TACHYON_CHECK(size >= 1) << "prefill context parallel size must be at least 1, got " << size;
  PcpPlan out;
  out.size = size;
  out.rank_tokens.resize(static_cast<size_t>(size));
  out.local.resize(static_cast<size_t>(size));
  out.logits_row_of.resize(static_cast<size_t>(size));
  out.token_sequence.assign(static_cast<size_t>(plan.num_tokens()), -1);
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const core::ScheduledSequence& s = plan.sequences[i];
    for (int64_t t = 0; t < s.num_tokens; ++t) out.token_sequence[static_cast<size_t>(s.first_token + t)] = static_cast<int64_t>(i);
    out.split = out.split || s.num_tokens > 1;
  }
  const int64_t n = plan.num_tokens(), pieces = 2 * int64_t{size};
  // Fewer rows than pieces would leave a rank without rows, and the forward needs one: replicated.
  if (size == 1 || n < pieces) out.split = false;
  std::unordered_map<int64_t, int64_t> logits_index;  // plan token -> index in plan.logits_rows
  for (size_t i = 0; i < plan.logits_rows.size(); ++i) logits_index[plan.logits_rows[i]] = static_cast<int64_t>(i);

  for (int r = 0; r < size; ++r) {
    core::StepPlan& local = out.local[static_cast<size_t>(r)];
    local.block_size = plan.block_size;
    std::vector<int64_t>& mine = out.rank_tokens[static_cast<size_t>(r)];
    // Pieces r and 2N-1-r of the step's rows [0, n); an unsplit step gives every row to every rank.
    const int64_t owned[2] = {r, pieces - 1 - r};
    for (int64_t piece : owned) {
      const int64_t begin = out.split ? n * piece / pieces : (piece == r ? 0 : n);
      const int64_t end = out.split ? n * (piece + 1) / pieces : n;
      for (int64_t t = begin; t < end; ++t) {
        const int64_t seq = out.token_sequence[static_cast<size_t>(t)];
        const core::ScheduledSequence& s = plan.sequences[static_cast<size_t>(seq)];
        if (t == begin || out.token_sequence[static_cast<size_t>(t - 1)] != seq) {  // a new run: a new entry
          // The sequence's sampling inputs come along; only the run that ends at its last row
          // (and so holds its logits row) samples.
          core::ScheduledSequence piece = s;
          piece.first_token = local.num_tokens();
          piece.num_tokens = 0;
          piece.num_computed = s.num_computed + (t - s.first_token);
          piece.sample = s.sample && std::min(end, s.first_token + s.num_tokens) == s.first_token + s.num_tokens;
          piece.next_token = -1;
          local.sequences.push_back(std::move(piece));
        }
        ++local.sequences.back().num_tokens;
        mine.push_back(t);
        local.token_ids.push_back(plan.token_ids[static_cast<size_t>(t)]);
        local.positions.push_back(plan.positions[static_cast<size_t>(t)]);
        local.slot_mapping.push_back(plan.slot_mapping[static_cast<size_t>(t)]);
        if (auto found = logits_index.find(t); found != logits_index.end()) {
          local.logits_rows.push_back(local.num_tokens() - 1);
          out.logits_row_of[static_cast<size_t>(r)].push_back(found->second);
        }
      }
    }
    out.gathered_tokens.insert(out.gathered_tokens.end(), mine.begin(), mine.end());
  }
  return out;
}

}  // namespace tachyon::runner
