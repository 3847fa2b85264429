#include "tachyon/engine/runner_drafter.h"

namespace tachyon::engine {

std::vector<int32_t> RunnerDrafter::propose(int64_t sequence_id, std::span<const int32_t> tokens) {
  auto it = drafts_.find(sequence_id);
  if (it == drafts_.end()) return {};
  Drafts drafts = std::move(it->second);
  drafts_.erase(it);
  if (drafts.continues != static_cast<int64_t>(tokens.size())) return {};
  return std::move(drafts.tokens);
}

void RunnerDrafter::observe(const core::StepPlan& plan, const core::StepOutput& output) {
  // The output lists the plan's sampled sequences in plan order.
  size_t next = 0;
  for (const core::ScheduledSequence& entry : plan.sequences) {
    if (!entry.sample) continue;
    if (next >= output.sequences.size()) break;
    const core::SequenceOutput& out = output.sequences[next++];
    if (out.sequence_id != entry.sequence_id) continue;  // not this plan's output (never expected)
    if (out.next_drafts.empty() || out.tokens.empty()) {
      drafts_.erase(entry.sequence_id);
      continue;
    }
    // Tokens known before the step: those in the cache, plus its slice without the drafts.
    const int64_t known = entry.num_computed + entry.num_tokens - entry.num_draft_tokens();
    drafts_[entry.sequence_id] = {out.next_drafts, known + static_cast<int64_t>(out.tokens.size())};
  }
}

}  // namespace tachyon::engine
