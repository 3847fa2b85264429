// StepOutput: what a runner returns for one step. One entry per sampled sequence of the plan, in
// plan order, holding 1 + accepted tokens: the drafts the runner accepted (each equal to the
// draft it verifies) and then the token it sampled after the last accepted one. Without drafts
// every entry holds exactly one token.
#pragma once

#include <cstdint>
#include <vector>

#include "tachyon/core/sampled_token.h"
#include "tachyon/core/step_plan.h"

namespace tachyon::core {

struct SequenceOutput {
  int64_t sequence_id = 0;
  std::vector<SampledToken> tokens;  // [1 + accepted] in order
  int64_t num_draft_tokens = 0;      // drafts it carried; accepted = tokens.size() - 1
  // Drafts for its next step that the runner made itself (MTP on the GPU,
  // runner/cuda/cuda_mtp_drafter.h), continuing `tokens` as if all were applied; empty otherwise.
  std::vector<int32_t> next_drafts;

  int64_t num_accepted() const { return static_cast<int64_t>(tokens.size()) - 1; }
};

struct StepOutput {
  std::vector<SequenceOutput> sequences;
  // [plan.num_tokens(), hidden] f32, only when the plan sets return_hidden_states (else empty):
  // the model's last hidden state BEFORE the final norm for every token row of the plan, in
  // token order, draft rows included (what DeepSeek's MTP module reads: model/mtp.h).
  std::vector<float> hidden_states;
};

// One sampled token per sampled sequence of `plan` (a plan without drafts) as a StepOutput.
StepOutput one_token_each(const StepPlan& plan, std::vector<SampledToken> sampled);
// Every token of `output` in order (one per sequence without drafts).
std::vector<SampledToken> flatten(const StepOutput& output);

}  // namespace tachyon::core
