#include "tachyon/engine/structured_masks.h"

#include <cstdio>
#include <exception>
#include <string>

#include "tachyon/structured/matcher.h"

namespace tachyon::engine {

std::shared_ptr<structured::Matcher> make_matcher(const core::SamplingParams& params) {
  if (params.structured == nullptr) return nullptr;
  return std::make_shared<structured::Matcher>(params.structured);
}

namespace {

void set_bit(std::vector<uint32_t>& words, int32_t id) {
  if (id < 0 || static_cast<size_t>(id >> 5) >= words.size()) return;
  words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
}

// The plan's view of a grammar mask: shared as is, or copied with the end tokens added.
std::shared_ptr<const std::vector<uint32_t>> plan_mask(const std::shared_ptr<const structured::TokenMask>& mask,
                                                       const core::SamplingParams& params, std::optional<int32_t> eos) {
  if (!mask->can_end) return {mask, &mask->words};  // aliasing: keeps the cached mask alive
  auto words = std::make_shared<std::vector<uint32_t>>(mask->words);
  if (eos) set_bit(*words, *eos);
  for (int32_t id : params.stop_token_ids) set_bit(*words, id);
  return words;
}

// What the client reads: `why` is the grammar's own message, which says what to change.
ConstraintFailure failure_of(const Sequence& sequence, const std::string& why) {
  return {sequence.request_id, sequence.index,
          "generation stopped: the output could not follow its structured-output constraint any further: " + why + "."};
}

// Logs each sequence whose mask failed and marks its matcher; returns them.
std::vector<ConstraintFailure> report_failures(const std::vector<std::pair<core::ScheduledSequence*, Sequence*>>& work,
                                               const std::vector<std::string>& failed) {
  std::vector<ConstraintFailure> out;
  for (size_t i = 0; i < work.size(); ++i) {
    if (failed[i].empty()) continue;
    Sequence& s = *work[i].second;
    std::fprintf(stderr, "tachyon: sequence %lld gets no token mask, finishing it: %s\n", static_cast<long long>(s.id),
                 failed[i].c_str());
    s.matcher->set_failure(failed[i]);
    out.push_back(failure_of(s, failed[i]));
  }
  return out;
}

// No token at all may come next: the grammar needs bytes that no token spells (and may not end,
// or the request has no end token). Sampling from an empty set fails the whole step.
bool allows_nothing(const structured::TokenMask& mask, const std::vector<uint32_t>& words) {
  if (mask.any_token) return false;
  for (uint32_t w : words) {
    if (w != 0) return false;
  }
  return true;
}

// The plan's mask for one sequence; throws (a message for the log) when it has none to give.
core::AllowedTokens sequence_mask(const std::shared_ptr<const structured::TokenMask>& mask,
                                  const core::SamplingParams& params, std::optional<int32_t> eos) {
  core::AllowedTokens words = plan_mask(mask, params, eos);
  if (allows_nothing(*mask, *words)) {
    throw structured::StructuredError("the grammar allows no token of the vocabulary at this point (it needs bytes "
                                      "that no token spells)");
  }
  return words;
}

}  // namespace

std::vector<ConstraintFailure> attach_token_masks(core::StepPlan& plan,
                                                  const std::unordered_map<int64_t, Sequence*>& sequences,
                                                  std::optional<int32_t> eos) {
  // Cache hits first, on this thread (a lookup each); only the misses need a walk.
  std::vector<std::pair<core::ScheduledSequence*, Sequence*>> work;
  for (core::ScheduledSequence& s : plan.sequences) {
    if (!s.sample) continue;
    auto it = sequences.find(s.sequence_id);
    if (it == sequences.end() || it->second->matcher == nullptr) continue;
    work.emplace_back(&s, it->second);
  }
  const int64_t n = static_cast<int64_t>(work.size());
  std::vector<std::string> failed(static_cast<size_t>(n));  // why each one's mask failed; "": it did not
  std::vector<uint8_t> missed(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    auto [entry, sequence] = work[static_cast<size_t>(i)];
    auto cached = sequence->matcher->cached_next_mask();
    missed[static_cast<size_t>(i)] = cached == nullptr;
    if (cached == nullptr) continue;
    try {
      entry->allowed_tokens = sequence_mask(cached, *sequence->params, eos);
    } catch (const std::exception& e) {
      failed[static_cast<size_t>(i)] = e.what();
    }
  }
  // Each matcher is touched by one thread; the grammar's cache locks itself. Threads only for
  // two misses or more: waking a team costs more than a cached step.
  // No exception may leave an OpenMP region: a failure is recorded and reported.
  int64_t misses = 0;
  for (uint8_t m : missed) misses += m;
#pragma omp parallel for schedule(dynamic, 1) if (misses > 1)
  for (int64_t i = 0; i < n; ++i) {
    if (!missed[static_cast<size_t>(i)]) continue;
    auto [entry, sequence] = work[static_cast<size_t>(i)];
    try {
      entry->allowed_tokens = sequence_mask(sequence->matcher->next_mask(), *sequence->params, eos);
    } catch (const std::exception& e) {  // GrammarBudgetError, a grammar nested too deeply, no token allowed
      failed[static_cast<size_t>(i)] = e.what();
    }
  }
  return report_failures(work, failed);
}

bool mark_masks_follow(core::StepPlan& plan, const std::unordered_map<int64_t, Sequence*>& sequences) {
  bool marked = false;
  for (core::ScheduledSequence& s : plan.sequences) {
    if (!s.sample) continue;
    auto it = sequences.find(s.sequence_id);
    s.mask_follows = it != sequences.end() && it->second->matcher != nullptr;
    marked |= s.mask_follows;
  }
  return marked;
}

std::vector<ConstraintFailure> late_token_masks(core::StepPlan& plan,
                                                const std::unordered_map<int64_t, Sequence*>& sequences,
                                                std::optional<int32_t> eos, std::vector<core::AllowedTokens>& masks) {
  std::vector<ConstraintFailure> failed = attach_token_masks(plan, sequences, eos);
  masks.clear();
  for (const core::ScheduledSequence& s : plan.sequences) {
    if (s.mask_follows) masks.push_back(s.allowed_tokens);
  }
  return failed;
}

std::vector<ConstraintFailure> advance_matchers(const core::StepOutput& output,
                                                const std::unordered_map<int64_t, Sequence*>& sequences) {
  std::vector<ConstraintFailure> refused;
  for (const core::SequenceOutput& s : output.sequences) {
    if (s.tokens.empty()) continue;
    auto it = sequences.find(s.sequence_id);
    if (it == sequences.end() || it->second->matcher == nullptr) continue;
    Sequence& sequence = *it->second;
    if (!sequence.matcher->failure().empty()) continue;  // sampled without a mask; being finished
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      const int32_t token = s.tokens[i].token;
      // The token that finished the sequence by EOS / a stop id is not text.
      if (i + 1 == s.tokens.size() && sequence.finished() && sequence.stop_token == token) break;
      bool accepted = false;
      std::string why;
      try {
        accepted = sequence.matcher->accept_token(token);
        if (!accepted) {
          why = "internal error: the engine sampled token " + std::to_string(token) +
                ", which the grammar refuses (please report it)";
          std::fprintf(stderr, "tachyon: internal: sequence %lld sampled token %d that its grammar refuses; aborting it\n",
                       static_cast<long long>(sequence.id), token);
        }
      } catch (const std::exception& e) {  // too ambiguous (GrammarBudgetError) or nested too deeply
        why = e.what();
        std::fprintf(stderr, "tachyon: sequence %lld cannot follow its grammar, finishing it: %s\n",
                     static_cast<long long>(sequence.id), e.what());
      }
      if (!accepted) {
        refused.push_back(failure_of(sequence, why));
        break;
      }
    }
  }
  return refused;
}

}  // namespace tachyon::engine
