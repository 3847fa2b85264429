#include "tachyon/structured/matcher.h"

namespace tachyon::structured {

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar) : grammar_(std::move(grammar)), pda_(grammar_->grammar()) {
  state_ = pda_.initial();
  state_ = pda_.compact(state_);
  compacted_size_ = pda_.arena().size();
}

bool Matcher::accept_bytes(std::string_view bytes) {
  const size_t mark = pda_.arena().size();
  const PdaState* current = &state_;
  int flip = 0;
  for (char c : bytes) {
    PdaState& next = scratch_[flip];
    if (!pda_.advance(*current, static_cast<uint8_t>(c), next)) {
      pda_.arena().resize(mark);
      return false;
    }
    current = &next;
    flip ^= 1;
  }
  state_ = *current;
  // Compaction copies the live stacks (O(depth)); done when the arena has doubled, so a token
  // costs O(1) amortized however deep the output nests.
  if (pda_.arena().size() > 2 * compacted_size_ + 1024) {
    state_ = pda_.compact(state_);
    compacted_size_ = pda_.arena().size();
  }
  return true;
}

bool Matcher::accept_token(int32_t id) {
  const TokenVocabulary& v = grammar_->vocabulary();
  if (id < 0 || id >= v.num_tokens()) return false;
  // A marker token (token_vocabulary.h) also has its private spelling, which only a grammar's
  // marker position takes, and is read as the marker first: a state may offer both the marker
  // and free text that its characters would spell (the end of a reasoning block asked for by id,
  // reasoning_prefix.h), and the model's marker token is the marker there, as the server's
  // reasoning parser reads it.
  if (v.is_marker(id) && accept_bytes(TokenVocabulary::marker_bytes(id))) return true;
  const std::string& bytes = v.token_bytes(id);
  return !bytes.empty() && accept_bytes(bytes);
}

bool Matcher::can_end() const { return pda_.accepting(state_); }

bool Matcher::must_end() const { return can_end() && pda_.next_bytes(state_).empty(); }

std::shared_ptr<const TokenMask> Matcher::next_mask() { return grammar_->mask(pda_, state_); }

std::shared_ptr<const TokenMask> Matcher::cached_next_mask() const { return grammar_->cached_mask(pda_, state_); }

}  // namespace tachyon::structured
