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
//
// Markers by id: where the vocabulary has both markers as marker tokens (token_vocabulary.h:
// Qwen3's and DeepSeek-R1's <think> and </think>), the block is asked for as those tokens, as the
// server's reasoning parser reads them: the start token, then any text without marker spellings
// (the same characters in ordinary pieces are text), then the end token.
#pragma once

#include <string>
#include <vector>

#include "tachyon/structured/grammar.h"
#include "tachyon/structured/token_vocabulary.h"

namespace tachyon::structured {

struct ReasoningPrefix {
  std::string start;           // "<think>"
  std::string end;             // "</think>"
  bool starts_inside = false;  // the prompt opened the reasoning block
};

// The markers of every reasoning format served (one format today: <think>, </think>).
std::vector<std::string> reasoning_markers();

// Makes g's root the reasoning prefix followed by its old root. g is not finished yet.
// `vocabulary` (may be null) decides whether the markers are asked for by id (above).
void add_reasoning_prefix(Grammar& g, const ReasoningPrefix& prefix, const TokenVocabulary* vocabulary = nullptr);

}  // namespace tachyon::structured
