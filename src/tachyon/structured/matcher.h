// Matcher: one sequence's position in its constraint. The engine advances it with every token the
// sequence accepts and asks it for the next step's mask (engine/structured_state in EngineCore).
// Cheap to create (the start state), not thread-safe (one sequence, one thread at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tachyon/structured/compiled_grammar.h"

namespace tachyon::structured {

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const CompiledGrammar> grammar);

  // accept_token, accept_bytes and next_mask throw GrammarBudgetError when the grammar is too
  // ambiguous here (pda.h); the state is then unchanged.
  //
  // Advances by the token's bytes, or a marker token's private spelling (token_vocabulary.h).
  // False (state unchanged) when the grammar refuses both, or the token takes no part in the
  // vocabulary (special and no marker, padding).
  bool accept_token(int32_t id);
  // Advances by raw bytes (tests, forced prefixes). False (state unchanged) when refused.
  bool accept_bytes(std::string_view bytes);
  // The output so far is complete per the grammar (EOS may come now).
  bool can_end() const;
  // Nothing but the end may follow (the grammar accepted and allows no more bytes).
  bool must_end() const;
  // The mask for the next token (shared with every sequence in the same state).
  std::shared_ptr<const TokenMask> next_mask();
  // The same when the grammar's cache has it; null when it would have to be computed.
  std::shared_ptr<const TokenMask> cached_next_mask() const;
  const CompiledGrammar& grammar() const { return *grammar_; }
  // Set by the engine when this sequence's mask failed (the reason, for its log): the sequence is
  // being finished, and its last token, sampled without a mask, is not fed to the matcher.
  void set_failure(std::string why) { failure_ = std::move(why); }
  const std::string& failure() const { return failure_; }
  // The parses still open (Pda stacks, kAccepted included); at most Pda::kMaxStacks.
  size_t num_stacks() const { return state_.size(); }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  Pda pda_;
  PdaState state_;
  PdaState scratch_[2];
  size_t compacted_size_ = 0;  // arena size after the last compaction
  std::string failure_;
};

}  // namespace tachyon::structured
