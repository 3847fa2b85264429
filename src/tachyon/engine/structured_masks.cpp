#include "tachyon/engine/structured_masks.h"

#include <cstdio>
#include <exception>

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

}  // namespace

std::vector<int64_t> attach_token_masks(core::StepPlan& plan, const std::unordered_map<int64_t, Sequence*>& sequences,
                                        std::optional<int32_t> eos) {
  // Cache hits first, on this thread (a lookup each); only the misses need a walk.
  std::vector<std::pair<core::ScheduledSequence*, Sequence*>> work;
  for (core::ScheduledSequence& s : plan.sequences) {
    if (!s.sample) continue;
    auto it = sequences.find(s.sequence_id);
    if (it == sequences.end() || it->second->matcher == nullptr) continue;
    if (auto cached = it->second->matcher->cached_next_mask()) {
      s.allowed_tokens = plan_mask(cached, *it->second->params, eos);
    } else {
      work.emplace_back(&s, it->second);
    }
  }
  const int64_t n = static_cast<int64_t>(work.size());
  // Each matcher is touched by one thread; the grammar's cache locks itself. Threads only for
  // two misses or more: waking a team costs more than a cached step.
  // No exception may leave an OpenMP region: a failure is recorded and reported.
  std::vector<uint8_t> failed(static_cast<size_t>(n), 0);
#pragma omp parallel for schedule(dynamic, 1) if (n > 1)
  for (int64_t i = 0; i < n; ++i) {
    auto [entry, sequence] = work[static_cast<size_t>(i)];
    try {
      entry->allowed_tokens = plan_mask(sequence->matcher->next_mask(), *sequence->params, eos);
    } catch (const std::exception&) {
      failed[static_cast<size_t>(i)] = 1;
    }
  }
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    if (!failed[static_cast<size_t>(i)]) continue;
    const Sequence& s = *work[static_cast<size_t>(i)].second;
    std::fprintf(stderr, "tachyon: the grammar of sequence %lld failed to give a mask (nested too deeply); aborting it\n",
                 static_cast<long long>(s.id));
    out.push_back(s.request_id);
  }
  return out;
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

std::vector<int64_t> late_token_masks(core::StepPlan& plan, const std::unordered_map<int64_t, Sequence*>& sequences,
                                      std::optional<int32_t> eos, std::vector<core::AllowedTokens>& masks) {
  std::vector<int64_t> failed = attach_token_masks(plan, sequences, eos);
  masks.clear();
  for (const core::ScheduledSequence& s : plan.sequences) {
    if (s.mask_follows) masks.push_back(s.allowed_tokens);
  }
  return failed;
}

std::vector<int64_t> advance_matchers(const core::StepOutput& output,
                                      const std::unordered_map<int64_t, Sequence*>& sequences) {
  std::vector<int64_t> refused;
  for (const core::SequenceOutput& s : output.sequences) {
    if (s.tokens.empty()) continue;
    auto it = sequences.find(s.sequence_id);
    if (it == sequences.end() || it->second->matcher == nullptr) continue;
    Sequence& sequence = *it->second;
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      const int32_t token = s.tokens[i].token;
      // The token that finished the sequence by EOS / a stop id is not text.
      if (i + 1 == s.tokens.size() && sequence.finished() && sequence.stop_token == token) break;
      bool accepted = false;
      try {
        accepted = sequence.matcher->accept_token(token);
      } catch (const std::exception&) {  // a grammar nested too deeply to expand
      }
      if (!accepted) {
        std::fprintf(stderr, "tachyon: internal: sequence %lld sampled token %d that its grammar refuses; aborting it\n",
                     static_cast<long long>(sequence.id), token);
        refused.push_back(sequence.request_id);
        break;
      }
    }
  }
  return refused;
}

}  // namespace tachyon::engine
