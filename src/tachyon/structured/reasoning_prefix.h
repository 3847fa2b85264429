// Reasoning-aware constraints (as vLLM's structured outputs with a reasoning parser): for a model
// that thinks before it answers, the request's constraint applies to the answer only, after the
// end-of-reasoning marker; the reasoning itself is free text. The grammar does it: its root
// becomes  reasoning? whitespace{0,4} constraint, where reasoning is
//   (starts_inside)  any bytes without the end marker, then the end marker
//   (otherwise)      the start marker, the same, or nothing (a model that does not think)
// which is what the server's reasoning parser splits off, so the content it leaves is what the
// constraint matched. The bytes before the end marker are a right-linear rule per matched prefix
// of the marker (KMP states), so a long reasoning keeps the automaton's stacks flat and its masks
// cached (one per state).
#pragma once

#include <string>

#include "tachyon/structured/grammar.h"

namespace tachyon::structured {

struct ReasoningPrefix {
  std::string start;           // "<think>"
  std::string end;             // "</think>"
  bool starts_inside = false;  // the prompt opened the reasoning block
};

// Makes g's root the reasoning prefix followed by its old root. g is not finished yet.
void add_reasoning_prefix(Grammar& g, const ReasoningPrefix& prefix);

}  // namespace tachyon::structured
