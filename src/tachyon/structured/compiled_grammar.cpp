#include "tachyon/structured/compiled_grammar.h"

#include <string>

namespace tachyon::structured {

namespace {

// The automaton as a DFA over bytes, built lazily during one mask walk: each distinct state (by
// content) gets an id, and each (state, byte) transition is computed once. Inside a JSON string
// every ASCII byte leads back to the same state, so the walk over the trie's 100K+ nodes becomes
// table lookups; only the few distinct transitions run the pushdown automaton.
class LazyDfa {
 public:
  static constexpr int32_t kUnknown = -2;
  static constexpr int32_t kDead = -1;

  LazyDfa(Pda& pda, int64_t max_steps) : pda_(pda), max_steps_(max_steps) {}

  int32_t intern(const PdaState& state) {
    std::vector<int32_t> key = pda_.key(state);
    auto [it, inserted] = ids_.try_emplace(std::move(key), static_cast<int32_t>(states_.size()));
    if (inserted) {
      states_.push_back(state);
      next_.emplace_back();
      next_.back().fill(kUnknown);
    }
    return it->second;
  }
  int32_t next(int32_t state, uint8_t b) {
    int32_t& to = next_[static_cast<size_t>(state)][b];
    if (to == kUnknown) {
      // states_ may grow inside intern(): take the source by value first.
      const PdaState from = states_[static_cast<size_t>(state)];
      const int32_t id = pda_.advance(from, b, scratch_) ? intern(scratch_) : kDead;
      charge(from.size() + scratch_.size());
      next_[static_cast<size_t>(state)][b] = id;
      return id;
    }
    return to;
  }

 private:
  void charge(size_t stacks) {
    steps_ += static_cast<int64_t>(stacks);
    if (steps_ <= max_steps_) return;
    throw GrammarBudgetError("the grammar is too ambiguous at this point: finding the tokens it allows took "
                             "more than " + std::to_string(max_steps_) +
                             " parser steps (the limit); rewrite it so that fewer alternatives stay open at once, e.g. "
                             "factor out the prefix they share");
  }

  Pda& pda_;
  int64_t max_steps_;
  int64_t steps_ = 0;  // stacks taken in and given out by the transitions computed so far
  std::vector<PdaState> states_;
  std::vector<std::array<int32_t, 256>> next_;
  std::unordered_map<std::vector<int32_t>, int32_t, CompiledGrammar::KeyHash> ids_;
  PdaState scratch_;
};

}  // namespace

bool fill_token_mask(Pda& pda, const PdaState& state, const TokenVocabulary& v, TokenMask& out, int64_t max_steps) {
  out.words.assign(static_cast<size_t>(v.num_mask_words()), 0u);
  out.can_end = pda.accepting(state);
  const size_t base = pda.arena().size();
  pda.clear_cut();
  {
    LazyDfa dfa(pda, max_steps);
    // states[d]: the DFA state after the first d bytes of the current trie path.
    std::vector<int32_t> states(static_cast<size_t>(v.max_depth_) + 1);
    states[0] = dfa.intern(state);
    const int32_t n = v.num_nodes();
    for (int32_t i = 1; i < n;) {
      const size_t d = v.node_depth_[static_cast<size_t>(i)];
      const int32_t next = dfa.next(states[d - 1], v.node_byte_[static_cast<size_t>(i)]);
      if (pda.cut_reached()) break;  // the mask needs frames the state was cut below
      if (next == LazyDfa::kDead) {
        i = v.node_end_[static_cast<size_t>(i)];  // no token below this prefix can match
        continue;
      }
      states[d] = next;
      for (int32_t t = v.node_tokens_[static_cast<size_t>(i)]; t < v.node_tokens_[static_cast<size_t>(i) + 1]; ++t) {
        const int32_t id = v.tokens_[static_cast<size_t>(t)];
        out.words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
        out.any_token = true;
      }
      ++i;
    }
  }
  pda.arena().resize(base);  // every node the walk added
  return !pda.cut_reached();
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocabulary,
                                 std::string description)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)), description_(std::move(description)) {
  TACHYON_CHECK(vocabulary_ != nullptr) << "internal: a compiled grammar needs a vocabulary";
  grammar_.finish();
}

size_t CompiledGrammar::KeyHash::operator()(const std::vector<int32_t>& key) const {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t v : key) {
    h ^= static_cast<uint32_t>(v);
    h *= 0x100000001b3ull;
  }
  return static_cast<size_t>(h ^ (h >> 29));
}

std::pair<bool, std::shared_ptr<const TokenMask>> CompiledGrammar::find(const std::vector<int32_t>& key) const {
  std::lock_guard lock(mutex_);
  auto it = index_.find(key);
  if (it == index_.end()) return {false, nullptr};
  lru_.splice(lru_.begin(), lru_, it->second);
  return {true, it->second->second};
}

std::shared_ptr<const TokenMask> CompiledGrammar::remember(std::vector<int32_t> key,
                                                           std::shared_ptr<const TokenMask> mask) const {
  std::lock_guard lock(mutex_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;
  lru_.emplace_front(key, mask);
  index_.emplace(std::move(key), lru_.begin());
  if (lru_.size() > kMaxCachedMasks) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return mask;
}

std::shared_ptr<const TokenMask> CompiledGrammar::mask(Pda& pda, const PdaState& state) const {
  for (int depth = kFirstCutDepth;; depth *= 2) {
    bool cut = false;
    std::vector<int32_t> key = pda.key(state, depth, &cut);
    if (auto [found, mask] = find(key); found && mask != nullptr) return mask;
    else if (found) continue;  // too shallow: the next depth
    // Computed outside the lock: two sequences may compute the same mask once each, but no
    // sequence waits for another's walk.
    const size_t mark = pda.arena().size();
    const PdaState walked = cut ? pda.truncate(state, depth) : state;
    auto computed = std::make_shared<TokenMask>();
    const bool complete = fill_token_mask(pda, walked, *vocabulary_, *computed);
    pda.arena().resize(mark);
    TACHYON_CHECK(complete || cut) << "internal: a walk of a whole state reached a cut";
    if (complete) return remember(std::move(key), std::move(computed));
    remember(std::move(key), nullptr);
  }
}

std::shared_ptr<const TokenMask> CompiledGrammar::cached_mask(const Pda& pda, const PdaState& state) const {
  for (int depth = kFirstCutDepth;; depth *= 2) {
    bool cut = false;
    auto [found, mask] = find(pda.key(state, depth, &cut));
    if (!found || mask != nullptr || !cut) return mask;
  }
}

size_t CompiledGrammar::cached_masks() const {
  std::lock_guard lock(mutex_);
  return lru_.size();
}

}  // namespace tachyon::structured
