// Drafter: proposes draft tokens for decoding sequences before each step (n-gram lookup, a draft
// model and MTP heads are drafters; the speculative-decoding work builds them). The engine asks
// it for every running sequence whose next step is a decode; the scheduler plans what fits and
// the runner verifies them, so a drafter affects speed only, never the tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tachyon::engine {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Proposed continuations of `tokens` (the sequence's prompt and outputs); empty: none.
  virtual std::vector<int32_t> propose(int64_t sequence_id, std::span<const int32_t> tokens) = 0;
};

}  // namespace tachyon::engine
