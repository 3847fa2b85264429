// Structured outputs in the engine: each constrained sequence has a Matcher (its position in the
// grammar); after schedule() every sampled constrained sequence gets its allowed-token mask in
// the plan, and after the step every token it accepted advances its matcher.
//
// Where the mask is computed, and why there: on the engine thread, right after schedule(), for
// the sequences that sample this step. A mask depends on the token the previous step sampled,
// so it cannot be computed earlier; the runner never sees grammars (it applies a bitmask). The
// work that could slow the loop is bounded two ways: masks come from the grammar's cache by
// automaton state (compiled_grammar.h), so a batch of sequences on one schema mostly copies a
// pointer, and the misses of one step are walked in parallel (OpenMP, one sequence per thread).
// With asynchronous scheduling the next plan is built before the last token is known. A runner
// that takes late masks (ModelRunner::takes_late_token_masks: the CUDA runner, the synchronous
// ones) launches step n+1 with its constrained sequences marked `mask_follows`; the engine
// applies step n, computes their masks from the advanced matchers, and supplies them while the
// device runs step n+1's forward (only the sampler waits for them). With any other runner the
// engine applies the step in flight before planning (it steps synchronously;
// EngineCore::run_step).
//
// Combinations: n > 1 (each sequence has its own matcher), preemption (the matcher follows the
// tokens, which recompute keeps) work. Speculative decoding: constrained sequences get no drafts
// (a draft token would need a mask per position); the others in the batch still draft.
// Tests: tests/unit/test_engine_structured.cpp (ctest -R structured).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tachyon/core/step_output.h"
#include "tachyon/core/step_plan.h"
#include "tachyon/engine/sequence.h"

namespace tachyon::engine {

// A constrained sequence that the engine finishes by itself, aborted: its mask failed or its grammar
// refused its token. Only that completion ends; its request's others go on.
struct ConstraintFailure {
  int64_t request_id = 0;
  int32_t index = 0;   // the completion within its request (Sequence::index)
  std::string reason;  // for its client (CompletionDelta::abort_reason): what failed and what to change
};

// A new Matcher for a sequence whose params carry a constraint; null otherwise.
std::shared_ptr<structured::Matcher> make_matcher(const core::SamplingParams& params);

// Sets ScheduledSequence::allowed_tokens for each sampled sequence with a matcher. `eos`: the
// model's EOS, allowed (with the request's stop_token_ids) where the grammar may end. Returns the
// sequences whose mask failed (a grammar too ambiguous for the parser's budget, pda.h, or that
// nests too deeply to expand, or a mask that allows no token at all, which the sampler cannot
// take): they sample without a mask this step, their matchers are marked failed, and the caller
// aborts them once it is applied. The engine goes on with every other sequence.
std::vector<ConstraintFailure> attach_token_masks(core::StepPlan& plan,
                                                  const std::unordered_map<int64_t, Sequence*>& sequences,
                                                  std::optional<int32_t> eos);

// Late masks: marks `mask_follows` on each sampled sequence with a matcher (never with drafts).
// Returns whether it marked any: the plan's masks then follow its launch.
bool mark_masks_follow(core::StepPlan& plan, const std::unordered_map<int64_t, Sequence*>& sequences);
// The masks of `plan`'s sequences marked mask_follows, in plan order, into `masks`: each one's
// mask as attach_token_masks gives it now, or null (every token allowed) for a sequence that has
// no matcher any more (its request finished or was aborted since the plan: its output is
// dropped). Returns the sequences whose mask failed, as attach_token_masks does.
std::vector<ConstraintFailure> late_token_masks(core::StepPlan& plan,
                                                const std::unordered_map<int64_t, Sequence*>& sequences,
                                                std::optional<int32_t> eos, std::vector<core::AllowedTokens>& masks);

// Advances the matchers by the tokens `output` applied (an EOS or stop token that ended a
// sequence is not fed; neither is a failed matcher's). Returns the sequences whose token the
// grammar refused (a broken invariant: the mask forbids it) or that made the state too ambiguous
// (GrammarBudgetError), for the caller to abort.
std::vector<ConstraintFailure> advance_matchers(const core::StepOutput& output,
                                                const std::unordered_map<int64_t, Sequence*>& sequences);

}  // namespace tachyon::engine
