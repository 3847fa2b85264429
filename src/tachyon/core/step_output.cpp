#include "tachyon/core/step_output.h"

#include "tachyon/base/check.h"

namespace tachyon::core {

StepOutput one_token_each(const StepPlan& plan, std::vector<SampledToken> sampled) {
  StepOutput output;
  size_t next = 0;
  for (const ScheduledSequence& s : plan.sequences) {
    if (!s.sample) continue;
    TACHYON_CHECK(s.draft_tokens.empty()) << "internal: one_token_each on a plan with drafts";
    TACHYON_CHECK(next < sampled.size()) << "internal: " << sampled.size() << " tokens for more sampled sequences";
    output.sequences.push_back({s.sequence_id, {std::move(sampled[next++])}, 0});
  }
  TACHYON_CHECK(next == sampled.size()) << "internal: " << sampled.size() << " tokens for " << next << " sampled sequences";
  return output;
}

std::vector<SampledToken> flatten(const StepOutput& output) {
  std::vector<SampledToken> tokens;
  for (const SequenceOutput& s : output.sequences) tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
  return tokens;
}

}  // namespace tachyon::core
