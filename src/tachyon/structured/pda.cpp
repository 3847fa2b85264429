#include "tachyon/structured/pda.h"

#include <algorithm>
#include <array>
#include <climits>
#include <string>
#include <unordered_map>

namespace tachyon::structured {
namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

// Grammars we build nest a few dozen rules deep; a user's EBNF could recurse without consuming
// input only through left recursion, which Grammar::finish refuses. This bounds what is left
// (a deeply nested grammar) so a bad one fails with a message instead of overflowing the stack.
constexpr int kMaxExpandDepth = 2000;

// The hash below a stack's lowest frame: the root's, or a cut's (a truncated stack never equals a
// whole one).
constexpr uint64_t kRootSeed = 0x51ed27u;
constexpr uint64_t kCutSeed = 0xc07c07c07ull;

constexpr int32_t kEmptySlot = INT32_MIN;
constexpr size_t kFirstSlots = 64;  // a power of two: most states hold a few stacks

[[noreturn]] void throw_too_ambiguous() {
  const std::string limit = std::to_string(Pda::kMaxStacks);
  throw GrammarBudgetError("the grammar is too ambiguous at this point: more than " + limit +
                           " parses of the output so far are still open (the limit is " + limit +
                           "); rewrite it so that fewer alternatives stay open at once, e.g. factor out the prefix "
                           "they share or make the recursion unambiguous");
}

}  // namespace

int32_t Pda::push(int32_t position, int32_t parent) {
  const uint64_t below = parent == kCut ? kCutSeed : parent < 0 ? kRootSeed : arena_[static_cast<size_t>(parent)].hash;
  arena_.push_back(StackNode{position, parent, mix(below, static_cast<uint64_t>(position))});
  return static_cast<int32_t>(arena_.size()) - 1;
}

bool Pda::same_stack(int32_t a, int32_t b) const {
  while (a != b) {
    if (a < 0 || b < 0) return false;
    const StackNode& x = arena_[static_cast<size_t>(a)];
    const StackNode& y = arena_[static_cast<size_t>(b)];
    if (x.position != y.position || x.hash != y.hash) return false;
    a = x.parent;
    b = y.parent;
  }
  return true;
}

void Pda::begin_state(PdaState& out) {
  out.clear();
  slots_.assign(kFirstSlots, kEmptySlot);
  accepted_added_ = false;
}

void Pda::add_unique(int32_t node, PdaState& out) {
  ++steps_;
  if (node == kAccepted) {
    if (!accepted_added_) out.push_back(kAccepted);
    accepted_added_ = true;
    return;
  }
  const size_t mask = slots_.size() - 1;
  size_t i = arena_[static_cast<size_t>(node)].hash & mask;
  for (; slots_[i] != kEmptySlot; i = (i + 1) & mask) {
    ++steps_;
    if (slots_[i] == node || same_stack(slots_[i], node)) return;
  }
  if (static_cast<int64_t>(out.size()) >= kMaxStacks) throw_too_ambiguous();
  slots_[i] = node;
  out.push_back(node);
  if (out.size() * 2 > slots_.size()) grow_slots(out);
}

// Doubles the set and puts `out`'s stacks back: O(stacks) amortized over the adds.
void Pda::grow_slots(const PdaState& out) {
  slots_.assign(slots_.size() * 2, kEmptySlot);
  const size_t mask = slots_.size() - 1;
  for (int32_t node : out) {
    if (node < 0) continue;
    size_t i = arena_[static_cast<size_t>(node)].hash & mask;
    while (slots_[i] != kEmptySlot) i = (i + 1) & mask;
    slots_[i] = node;
  }
}

// Makes `node`'s top a byte set (or the accepted marker): a rule reference pushes the rule's
// alternatives above the continuation, an alternative's end returns to the frame below.
void Pda::expand(int32_t node, PdaState& out, int depth) {
  if (depth > kMaxExpandDepth) throw StructuredError("the grammar nests too deeply to match");
  if (node == kAccepted) {
    add_unique(kAccepted, out);
    return;
  }
  if (node == kCut) {  // the frame below was cut off: this walk cannot tell what follows
    cut_reached_ = true;
    return;
  }
  const std::vector<Element>& elements = grammar_.elements();
  const StackNode frame = arena_[static_cast<size_t>(node)];
  const Element& e = elements[static_cast<size_t>(frame.position)];
  switch (e.kind) {
    case Element::kBytes:
      add_unique(node, out);
      return;
    case Element::kEnd:
      expand(frame.parent, out, depth + 1);
      return;
    case Element::kRule: {
      // The continuation after the call; skipped when it is the alternative's end (tail call).
      const int32_t after = frame.position + 1;
      int32_t continuation = frame.parent;
      if (elements[static_cast<size_t>(after)].kind != Element::kEnd) continuation = push(after, frame.parent);
      for (int32_t start : grammar_.alternatives(e.index)) {
        expand(push(start, continuation), out, depth + 1);
      }
      return;
    }
  }
}

PdaState Pda::initial() {
  PdaState state;
  begin_state(state);
  for (int32_t start : grammar_.alternatives(grammar_.root())) expand(push(start, -1), state, 0);
  return state;
}

bool Pda::advance(const PdaState& from, uint8_t b, PdaState& to) {
  begin_state(to);
  const std::vector<Element>& elements = grammar_.elements();
  const std::vector<ByteSet>& sets = grammar_.byte_sets();
  for (int32_t node : from) {
    ++steps_;
    if (node == kAccepted) continue;
    const StackNode frame = arena_[static_cast<size_t>(node)];
    const Element& e = elements[static_cast<size_t>(frame.position)];
    if (!sets[static_cast<size_t>(e.index)].test(b)) continue;
    expand(push(frame.position + 1, frame.parent), to, 0);
  }
  return !to.empty();
}

bool Pda::accepting(const PdaState& state) const {
  return std::find(state.begin(), state.end(), kAccepted) != state.end();
}

ByteSet Pda::next_bytes(const PdaState& state) const {
  ByteSet out;
  for (int32_t node : state) {
    if (node == kAccepted) continue;
    const ByteSet& s = grammar_.byte_sets()[static_cast<size_t>(
        grammar_.elements()[static_cast<size_t>(arena_[static_cast<size_t>(node)].position)].index)];
    for (size_t w = 0; w < 4; ++w) out.bits[w] |= s.bits[w];
  }
  return out;
}

PdaState Pda::compact(const PdaState& state) {
  // Iterative (a stack may be as deep as the output is long): each chain is copied bottom-up,
  // stopping at the first node already copied, so parents always come first.
  std::vector<StackNode> fresh;
  std::unordered_map<int32_t, int32_t> renumbered;
  std::vector<int32_t> chain;
  PdaState out;
  for (int32_t top : state) {
    if (top < 0) {
      out.push_back(top);
      continue;
    }
    chain.clear();
    for (int32_t n = top; n >= 0 && !renumbered.count(n); n = arena_[static_cast<size_t>(n)].parent) chain.push_back(n);
    for (size_t k = chain.size(); k-- > 0;) {
      const StackNode& old = arena_[static_cast<size_t>(chain[k])];
      const int32_t parent = old.parent < 0 ? old.parent : renumbered.at(old.parent);
      fresh.push_back(StackNode{old.position, parent, old.hash});
      renumbered.emplace(chain[k], static_cast<int32_t>(fresh.size()) - 1);
    }
    out.push_back(renumbered.at(top));
  }
  arena_ = std::move(fresh);
  return out;
}

// Per stack: its top position and the 64-bit hash of all its positions (StackNode::hash), sorted.
// O(stacks), not O(depth): a deeply nested output costs no more per token. Two different states
// share a key only on a 64-bit hash collision.
std::vector<int32_t> Pda::key(const PdaState& state) const { return key(state, INT32_MAX, nullptr); }

// A stack no deeper than `depth` keeps its hash; a deeper one gets the hash its truncated copy
// would have (push() from kCut up over its top `depth` positions), so the key equals
// key(truncate(state, depth)) and costs O(stacks x depth).
std::vector<int32_t> Pda::key(const PdaState& state, int depth, bool* cut) const {
  std::vector<std::array<int32_t, 3>> stacks;
  std::vector<int32_t> positions;
  if (cut != nullptr) *cut = false;
  for (int32_t node : state) {
    if (node == kAccepted) {
      stacks.push_back({-1, 0, 0});
      continue;
    }
    const StackNode& top = arena_[static_cast<size_t>(node)];
    uint64_t hash = top.hash;
    if (depth < INT32_MAX) {
      positions.clear();
      int32_t n = node;
      for (; n >= 0 && static_cast<int>(positions.size()) < depth; n = arena_[static_cast<size_t>(n)].parent) {
        positions.push_back(arena_[static_cast<size_t>(n)].position);
      }
      if (n >= 0) {
        hash = kCutSeed;
        for (size_t k = positions.size(); k-- > 0;) hash = mix(hash, static_cast<uint64_t>(positions[k]));
        if (cut != nullptr) *cut = true;
      }
    }
    stacks.push_back({top.position, static_cast<int32_t>(hash & 0xffffffffu), static_cast<int32_t>(hash >> 32)});
  }
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());  // stacks that differ only below the cut
  std::vector<int32_t> out;
  for (const auto& s : stacks) out.insert(out.end(), s.begin(), s.end());
  return out;
}

PdaState Pda::truncate(const PdaState& state, int depth) {
  PdaState out;
  begin_state(out);
  std::vector<int32_t> positions;
  for (int32_t node : state) {
    if (node == kAccepted) {
      add_unique(kAccepted, out);
      continue;
    }
    positions.clear();
    int32_t n = node;
    for (; n >= 0 && static_cast<int>(positions.size()) < depth; n = arena_[static_cast<size_t>(n)].parent) {
      positions.push_back(arena_[static_cast<size_t>(n)].position);
    }
    int32_t copy = n >= 0 ? kCut : -1;
    for (size_t k = positions.size(); k-- > 0;) copy = push(positions[k], copy);
    add_unique(copy, out);
  }
  return out;
}

}  // namespace tachyon::structured
