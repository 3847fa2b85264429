#include "tachyon/structured/compiled_grammar.h"

namespace tachyon::structured {

void fill_token_mask(Pda& pda, const PdaState& state, const TokenVocabulary& v, TokenMask& out) {
  out.words.assign(static_cast<size_t>(v.num_mask_words()), 0u);
  out.can_end = pda.accepting(state);
  const size_t base = pda.arena().size();
  // states[d]: the state after the first d bytes of the current trie path; marks[d]: the arena
  // size once it was computed (everything above belongs to paths already left).
  std::vector<PdaState> states(static_cast<size_t>(v.max_depth_) + 1);
  std::vector<size_t> marks(static_cast<size_t>(v.max_depth_) + 1, base);
  states[0] = state;
  const int32_t n = v.num_nodes();
  for (int32_t i = 1; i < n;) {
    const size_t d = v.node_depth_[static_cast<size_t>(i)];
    pda.arena().resize(marks[d - 1]);
    if (!pda.advance(states[d - 1], v.node_byte_[static_cast<size_t>(i)], states[d])) {
      i = v.node_end_[static_cast<size_t>(i)];  // no token below this prefix can match
      continue;
    }
    marks[d] = pda.arena().size();
    for (int32_t t = v.node_tokens_[static_cast<size_t>(i)]; t < v.node_tokens_[static_cast<size_t>(i) + 1]; ++t) {
      const int32_t id = v.tokens_[static_cast<size_t>(t)];
      out.words[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
    }
    ++i;
  }
  pda.arena().resize(base);
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

std::shared_ptr<const TokenMask> CompiledGrammar::mask(Pda& pda, const PdaState& state) const {
  std::vector<int32_t> key = pda.key(state);
  {
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  // Computed outside the lock: two sequences may compute the same mask once each, but no
  // sequence waits for another's walk.
  auto computed = std::make_shared<TokenMask>();
  fill_token_mask(pda, state, *vocabulary_, *computed);
  std::lock_guard lock(mutex_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;
  lru_.emplace_front(key, computed);
  index_.emplace(std::move(key), lru_.begin());
  if (lru_.size() > kMaxCachedMasks) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return computed;
}

size_t CompiledGrammar::cached_masks() const {
  std::lock_guard lock(mutex_);
  return lru_.size();
}

}  // namespace tachyon::structured
