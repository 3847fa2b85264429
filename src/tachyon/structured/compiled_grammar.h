// CompiledGrammar: a Grammar bound to a TokenVocabulary, with the cache of token masks by
// automaton state. Immutable apart from the cache (thread-safe), shared by every sequence that
// uses the same constraint; each sequence has its own Matcher (matcher.h).
//
// Why a cache by state: the mask depends only on the automaton's state (the set of stacks), and
// structured output visits few distinct states over and over: inside a string value the state
// after each character is the same (tail calls keep the stack flat), so is the state after each
// digit of a number or before each item of an array. The first visit walks the vocabulary trie
// (milliseconds for 128K tokens inside a string, microseconds where few bytes may follow); every
// later one, by any sequence of the batch, is a lookup. Bounded LRU: kMaxCachedMasks per grammar.
//
// The key is the state cut to the top kFirstCutDepth frames of each stack (pda.h, truncate), so
// the states of a recursive schema at every nesting depth share one mask; when the walk of the
// cut state needs a frame below the cut (a token that closes more levels than were kept), the
// key is remembered as too shallow and the state is keyed and walked at twice the depth, up to
// the whole state. A mask so found is the mask of the whole state (the walk read no frame it
// did not keep).
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "tachyon/structured/grammar.h"
#include "tachyon/structured/pda.h"
#include "tachyon/structured/token_vocabulary.h"

namespace tachyon::structured {

struct TokenMask {
  // [vocabulary.num_mask_words()] bit (id % 32) of word (id / 32) set: token id may come next.
  // EOS and stop ids are never set here: the engine adds them when can_end.
  std::vector<uint32_t> words;
  bool can_end = false;  // the output is complete per the grammar: EOS / stop may come next
  bool any_token = false;  // some bit of `words` is set (without it, only an end may come next)
  bool allows(int32_t id) const { return (words[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u; }
};

// The walk itself: every token whose bytes the automaton can take from `state`. It runs the
// automaton as a DFA built lazily for this walk (each distinct state and byte transition computed
// once, then table lookups per trie node). Nodes it adds to pda's arena are removed again.
// False (and `out` incomplete) when the walk popped into a cut stack's kCut (pda.h).
// Throws GrammarBudgetError when a state passes Pda::kMaxStacks or the walk passes kMaxMaskSteps.
//
// Why a budget per walk as well as per state: a walk computes one automaton transition per trie
// node that reaches a new state, so a state of S stacks costs up to S x (trie nodes) work on the
// engine thread. kMaxMaskSteps bounds the stacks its transitions take in and give out: the
// existing structured tests' walks (schema corpus, tool calls, 151K-token Qwen3 vocabulary)
// reach at most 51,247 (measured); at roughly 50 ns a step, 2^23 stops a walk at about 0.4 s
// of the engine's time, 160 times above that.
inline constexpr int64_t kMaxMaskSteps = int64_t{1} << 23;
// `max_steps`: the budget (tests pass a smaller one).
bool fill_token_mask(Pda& pda, const PdaState& state, const TokenVocabulary& vocabulary, TokenMask& out,
                     int64_t max_steps = kMaxMaskSteps);

class CompiledGrammar {
 public:
  static constexpr size_t kMaxCachedMasks = 256;  // entries, "too shallow" keys included
  static constexpr int kFirstCutDepth = 4;         // frames per stack in the first key tried

  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary, std::string description);

  const Grammar& grammar() const { return grammar_; }
  const TokenVocabulary& vocabulary() const { return *vocabulary_; }
  const std::string& description() const { return description_; }  // e.g. "json_schema", for logs

  // The mask of `state` (a state of a Pda over this grammar), from the cache or computed.
  std::shared_ptr<const TokenMask> mask(Pda& pda, const PdaState& state) const;
  // From the cache only; null when it would have to be computed.
  std::shared_ptr<const TokenMask> cached_mask(const Pda& pda, const PdaState& state) const;
  size_t cached_masks() const;

  struct KeyHash {  // of Pda::key()
    size_t operator()(const std::vector<int32_t>& key) const;
  };

 private:
  // A null mask: the key is too shallow (its walk reached a cut), try the next depth.
  using Lru = std::list<std::pair<std::vector<int32_t>, std::shared_ptr<const TokenMask>>>;
  // Looks the key up (under the lock): {found, mask}.
  std::pair<bool, std::shared_ptr<const TokenMask>> find(const std::vector<int32_t>& key) const;
  // Stores the mask (or a too-shallow null) under the key unless present; returns what is stored.
  std::shared_ptr<const TokenMask> remember(std::vector<int32_t> key, std::shared_ptr<const TokenMask> mask) const;

  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocabulary_;
  std::string description_;
  mutable std::mutex mutex_;
  mutable Lru lru_;  // most recent first
  mutable std::unordered_map<std::vector<int32_t>, Lru::iterator, KeyHash> index_;
};

}  // namespace tachyon::structured
