// NgramDrafter: prompt-lookup drafting, vLLM's "ngram" method. The sequence's last n tokens
// (n from max_n down to min_n) are looked up in the sequence itself; the k tokens that followed
// their most recent earlier occurrence are the drafts; where those run into the end of the
// sequence, the text is taken to repeat with the period between the occurrence and the end (a
// loop goes on), so k drafts come even from a short loop. It costs no model and wins where the
// output copies its context (code edits, quoting, summaries, structured output), and it is
// verified like any drafter: the tokens never change (engine/drafter.h).
//
// The one decision: one backward scan over a bounded window. Candidate occurrences end within
// the last `window` tokens before the final one (default 4096); the scan compares each
// candidate's tokens backwards with the sequence's suffix, keeps the longest match (capped at
// max_n) seen first, which is the most recent one of that length, and stops at the first match
// of max_n. So a step costs O(window * max_n) at worst and O(window) typically, whatever the
// context length, with no per-sequence state to grow or free. vLLM scans the whole context (KMP
// over the reversed tokens) and, among matches of the longest n, takes the earliest one; we take
// the most recent, which is what a bounded window can see and is the closer context.
// Test: tests/unit/test_ngram_drafter.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tachyon/engine/drafter.h"

namespace tachyon::engine {

struct NgramOptions {
  int32_t min_n = 1;           // shortest suffix looked up
  int32_t max_n = 4;           // longest suffix looked up (matches stop growing there)
  int32_t num_tokens = 4;      // k: the drafts proposed when a suffix recurs
  int64_t window = 4096;       // occurrences must end within this many tokens before the last one
};

// The drafts for `tokens` (prompt and outputs so far): the tokens after the most recent earlier
// occurrence of the longest suffix of length in [min_n, max_n], num_tokens of them (past the end
// of `tokens`, repeating the occurrence's period); empty when no suffix of at least min_n recurs.
std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, const NgramOptions& options);

class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(const NgramOptions& options);
  std::vector<int32_t> propose(int64_t sequence_id, std::span<const int32_t> tokens) override;

 private:
  NgramOptions options_;
};

}  // namespace tachyon::engine
