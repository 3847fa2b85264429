// Grammar: the one form every constraint compiles to (JSON schema, regex, choice list, EBNF), a
// context-free grammar over bytes. A rule is a list of alternatives; an alternative is a sequence
// of elements, each a byte set (one byte out of a 256-bit set) or a reference to a rule.
//
// Why bytes and not characters: the model's vocabulary is byte-level BPE, where a token may end in
// the middle of a UTF-8 character. Matching bytes lets a token's bytes be fed one by one whatever
// they are; UTF-8 well-formedness is part of the grammar (utf8_ranges.h spells a character class
// as byte sequences), so a constrained output never holds an invalid byte sequence either.
//
// Why a flat element array: the matcher (matcher.h) keeps positions into it on its stacks, so a
// position is one int32 and "the next element" is position + 1. Every alternative ends with a kEnd
// element (where the matcher returns to the caller).
//
// Builders (json_schema.h, regex_grammar.h, ...) call add_rule/add_alternative; finish() checks the
// grammar (every rule has an alternative, no left recursion, which the matcher's expansion could
// not end) and fixes it. Errors are StructuredError with a message for the user (a 400).
//
// Why an element budget (kMaxElements): repeats inline their copies, so chained ones multiply
// (a{4096}{4096}{4096} is 20 bytes of regex and 68G elements), and every builder (regex, EBNF,
// JSON schema, tool calls) ends up in repeat and add_alternative. Both charge the budget before
// they allocate, so a request that would build too much is a 400, whoever built it.
#pragma once

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tachyon/base/check.h"

namespace tachyon::structured {

// A constraint the request asked for cannot be compiled: bad schema, unsupported keyword, bad
// regex or grammar. The message names the field or keyword; the server turns it into a 400.
class StructuredError : public Error {
 public:
  using Error::Error;
};

// One byte out of a set of 256.
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  struct Hash {
    size_t operator()(const ByteSet& s) const {
      uint64_t h = 0;
      for (uint64_t w : s.bits) h = (h ^ w) * 0x9E3779B97F4A7C15ull + (h >> 29);
      return static_cast<size_t>(h);
    }
  };
  bool test(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void set(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
  static ByteSet of(uint8_t b) {
    ByteSet s;
    s.set(b);
    return s;
  }
  static ByteSet range(uint8_t lo, uint8_t hi) {
    ByteSet s;
    s.set_range(lo, hi);
    return s;
  }
};

struct Element {
  enum Kind : uint8_t { kBytes, kRule, kEnd };
  Kind kind = kEnd;
  int32_t index = 0;  // kBytes: into Grammar::byte_sets; kRule: the rule id
};

// A sequence of elements under construction (no kEnd): what builders concatenate.
using Sequence = std::vector<Element>;

class Grammar {
 public:
  // The most elements a grammar may build: those of its rules plus the copies its repeats inline
  // (counted when made and again when added to a rule, so the figure bounds the memory spent
  // building as well as the grammar kept, 8 bytes each). 8M built is at most 64 MiB kept and about
  // half a second of building. The grammars of the structured tests and the schema corpus build a
  // few hundred; a string of maxLength 4096 builds 12K, a JSON array of 1000 strings of minLength
  // 1000 about 2M kept (4M built). Refused past it, naming the figure (a 400).
  static constexpr int64_t kMaxElements = int64_t{1} << 23;
  // --- Building ---
  int32_t add_rule(std::string name);  // a new rule without alternatives; names are for printing
  void add_alternative(int32_t rule, const Sequence& sequence);
  // Sequences that builders concatenate with append().
  Sequence bytes(const ByteSet& set);  // one byte of the set
  Sequence literal(std::string_view text);  // the bytes of text, one element each
  static Sequence ref(int32_t rule) { return {Element{Element::kRule, rule}}; }
  // New rules for common shapes (right-recursive, so the matcher's stacks stay flat).
  int32_t rule_of(std::string name, const std::vector<Sequence>& alternatives);
  Sequence star(const Sequence& item, const std::string& name);     // item*
  Sequence optional(const Sequence& item, const std::string& name);  // item?
  // item{min,max}; max < 0: unbounded.
  Sequence repeat(const Sequence& item, int64_t min, int64_t max, const std::string& name);
  void set_root(int32_t rule) { root_ = rule; }
  // Checks and freezes; throws StructuredError (an empty rule, left recursion).
  void finish();

  // --- Reading (after finish) ---
  int32_t root() const { return root_; }
  int32_t num_rules() const { return static_cast<int32_t>(rule_starts_.size()); }
  const std::vector<Element>& elements() const { return elements_; }
  const std::vector<ByteSet>& byte_sets() const { return byte_sets_; }
  // [num alternatives of rule] positions in elements() where each alternative starts.
  const std::vector<int32_t>& alternatives(int32_t rule) const { return rule_starts_[static_cast<size_t>(rule)]; }
  const std::string& rule_name(int32_t rule) const { return names_[static_cast<size_t>(rule)]; }
  // The grammar in xgrammar's EBNF syntax (root first), for debugging and the oracle test.
  std::string to_ebnf() const;
  // About the bytes the grammar holds (its elements, byte sets, rules and their names): what the
  // compiler's cache (grammar_compiler.h) counts against its byte budget.
  size_t memory_bytes() const;

 private:
  int32_t intern(const ByteSet& set);
  // Counts n more elements against kMaxElements; throws StructuredError past it.
  void spend(int64_t n);
  std::vector<bool> nullable_rules() const;
  void check_left_recursion() const;

  std::vector<Element> elements_;
  std::vector<std::vector<int32_t>> rule_starts_;
  std::vector<std::string> names_;
  std::vector<ByteSet> byte_sets_;
  std::unordered_map<ByteSet, int32_t, ByteSet::Hash> byte_set_ids_;  // byte_sets_ by content
  int64_t spent_ = 0;  // elements built so far (kMaxElements)
  int32_t root_ = -1;
  bool finished_ = false;
};

// Appends b to a.
inline void append(Sequence& a, const Sequence& b) { a.insert(a.end(), b.begin(), b.end()); }
inline Sequence concat(std::initializer_list<Sequence> parts) {
  Sequence out;
  for (const Sequence& p : parts) append(out, p);
  return out;
}

}  // namespace tachyon::structured
