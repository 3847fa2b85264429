// Pda: the pushdown automaton that runs a Grammar over bytes. Its state is a set of stacks (the
// grammar may be ambiguous for a few bytes: two properties sharing a prefix, a number that may
// go on or end); each stack holds grammar positions, the top one the byte set to match next and
// the ones below it where to continue when a rule's alternative ends.
//
// Why persistent stacks in an arena: advancing by a byte replaces a stack's top, and expanding a
// rule pushes one frame per alternative; with stacks as linked nodes {position, parent} in one
// vector, both are O(1) appends that share the frames below, and undoing them is a resize. The
// token-mask walk (token_mask.h) advances one byte per trie node and throws the new nodes away
// when it leaves the subtree, so a mask costs no allocation. A frame whose continuation is its
// alternative's end is never pushed (a tail call), so right recursion (item*) keeps stacks flat
// and a state inside a long string or array repeats exactly, which the mask cache relies on.
//
// A state is the list of top node ids, deduplicated by content; kAccepted stands for a stack that
// finished the root rule (the output may end here). Deduplication goes through a hash set keyed by
// StackNode::hash (contents compared on a hash match), so a state of S stacks costs O(S) to build:
// 50,000 enum values sharing a prefix keep 50,000 stacks alive, and a scan of the state per stack
// took 46 s for one request.
//
// Why a cap on the stacks of a state (kMaxStacks): an ambiguous grammar ("a" root "b" | "a" root
// "c") doubles its stacks with every byte, and the engine computes masks on its own thread, so
// one such request stalled every client for minutes. Past the cap the Pda throws
// GrammarBudgetError, which finishes that sequence alone (engine/structured_masks.h).
//
// Why truncated states (truncate, key with a depth): a token's bytes pop at most a few frames, so
// the mask of a state deep in a recursive output (a tree of objects) depends only on the top
// frames of its stacks; the mask cache keys a state by those, so one mask serves every nesting
// depth. A truncated stack ends in kCut instead of the root's -1; a walk that pops into kCut
// (it needed a frame that was cut off) sets cut_reached(), and the caller retries deeper.
#pragma once

#include <cstdint>
#include <vector>

#include "tachyon/structured/grammar.h"

namespace tachyon::structured {

struct StackNode {
  int32_t position = 0;  // index into Grammar::elements()
  int32_t parent = -1;   // node below, -1: the root rule's frame
  uint64_t hash = 0;     // of the whole stack's positions, for deduplication
};

// A request's grammar needs more work than the parser allows one state or one mask: the message
// says which limit and what to change. The engine finishes that sequence, the others go on.
class GrammarBudgetError : public StructuredError {
 public:
  using StructuredError::StructuredError;
};

inline constexpr int32_t kAccepted = -1;
inline constexpr int32_t kCut = -2;  // the parent of a truncated stack's lowest kept frame

using PdaState = std::vector<int32_t>;  // top node ids (or kAccepted), unique by content

class Pda {
 public:
  // The most stacks one state may hold. JSON schemas and tool-call grammars stay in the tens (an
  // object's optional properties, a union's branches; 128 tools, the OpenAI limit, keep 128
  // alive); the existing tests reach at most 300 (measured). 65,536 still lets an enum of 50,000 values
  // through (each value is a stack until the values part), and a state this size advances in a
  // few milliseconds; an exponentially ambiguous grammar reaches it in 16 bytes.
  static constexpr int kMaxStacks = 1 << 16;

  explicit Pda(const Grammar& grammar) : grammar_(grammar) {}

  std::vector<StackNode>& arena() { return arena_; }
  const std::vector<StackNode>& arena() const { return arena_; }

  // The start state (the root's alternatives expanded), appended to the arena.
  PdaState initial();
  // `to` = the stacks of `from` whose top matches `b`, advanced and expanded. New nodes are
  // appended to the arena. Returns !to.empty(). Throws GrammarBudgetError past kMaxStacks.
  bool advance(const PdaState& from, uint8_t b, PdaState& to);
  bool accepting(const PdaState& state) const;
  // Bytes some stack of `state` may take next.
  ByteSet next_bytes(const PdaState& state) const;
  // Copies the stacks of `state` into a fresh arena (dropping every other node); returns the
  // state renumbered into it. Called after each accepted token so the arena stays small.
  PdaState compact(const PdaState& state);
  // A canonical key of the state's content (independent of node ids), for the mask cache: each
  // stack's top position and content hash.
  std::vector<int32_t> key(const PdaState& state) const;
  // The key of truncate(state, depth) without building it; *cut: some stack was cut.
  std::vector<int32_t> key(const PdaState& state, int depth, bool* cut) const;
  // `state` with each stack cut to its top `depth` frames (new nodes in the arena, the cut ones
  // ending in kCut), deduplicated by content.
  PdaState truncate(const PdaState& state, int depth);
  // Some expansion since clear_cut() popped into kCut.
  bool cut_reached() const { return cut_reached_; }
  void clear_cut() { cut_reached_ = false; }
  // Work done so far: stacks examined, added and compared while building states (tests check
  // that a state costs O(stacks)).
  int64_t steps() const { return steps_; }

 private:
  int32_t push(int32_t position, int32_t parent);
  void expand(int32_t node, PdaState& out, int depth);
  // Empties `out` and the set of its stacks; add_unique() then keeps both in step.
  void begin_state(PdaState& out);
  void add_unique(int32_t node, PdaState& out);
  void grow_slots(const PdaState& out);
  bool same_stack(int32_t a, int32_t b) const;

  const Grammar& grammar_;
  std::vector<StackNode> arena_;
  bool cut_reached_ = false;
  // The state being built, as an open-addressing hash set of its node ids (kEmptySlot: free),
  // keyed by StackNode::hash; at most half full. kAccepted is a flag, not a slot.
  std::vector<int32_t> slots_;
  bool accepted_added_ = false;
  int64_t steps_ = 0;
};

}  // namespace tachyon::structured
