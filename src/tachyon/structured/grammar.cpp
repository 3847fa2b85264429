#include "tachyon/structured/grammar.h"

#include <algorithm>
#include <cstdio>

namespace tachyon::structured {

int32_t Grammar::add_rule(std::string name) {
  TACHYON_CHECK(!finished_) << "internal: add_rule after finish";
  rule_starts_.emplace_back();
  names_.push_back(std::move(name));
  return static_cast<int32_t>(rule_starts_.size()) - 1;
}

void Grammar::add_alternative(int32_t rule, const Sequence& sequence) {
  TACHYON_CHECK(!finished_ && rule >= 0 && rule < num_rules()) << "internal: bad rule " << rule;
  spend(static_cast<int64_t>(sequence.size()) + 1);
  rule_starts_[static_cast<size_t>(rule)].push_back(static_cast<int32_t>(elements_.size()));
  elements_.insert(elements_.end(), sequence.begin(), sequence.end());
  elements_.push_back(Element{Element::kEnd, rule});
}

void Grammar::spend(int64_t n) {
  if (n > kMaxElements - spent_) {
    throw StructuredError("the constraint is too large: it would build more than " + std::to_string(kMaxElements) +
                          " grammar elements (repetition counts multiply, as in a{100}{100}, or minItems times "
                          "minLength); lower the counts or repeat a group instead of a repetition");
  }
  spent_ += n;
}

// A hash map, not a search: a grammar may hold tens of thousands of distinct classes.
int32_t Grammar::intern(const ByteSet& set) {
  const auto [it, added] = byte_set_ids_.try_emplace(set, static_cast<int32_t>(byte_sets_.size()));
  if (added) byte_sets_.push_back(set);
  return it->second;
}

Sequence Grammar::bytes(const ByteSet& set) {
  if (set.empty()) throw StructuredError("the constraint has a character class that matches nothing");
  return {Element{Element::kBytes, intern(set)}};
}

Sequence Grammar::literal(std::string_view text) {
  Sequence out;
  for (char c : text) out.push_back(Element{Element::kBytes, intern(ByteSet::of(static_cast<uint8_t>(c)))});
  return out;
}

int32_t Grammar::rule_of(std::string name, const std::vector<Sequence>& alternatives) {
  const int32_t rule = add_rule(std::move(name));
  for (const Sequence& alt : alternatives) add_alternative(rule, alt);
  return rule;
}

Sequence Grammar::star(const Sequence& item, const std::string& name) {
  const int32_t rule = add_rule(name);
  add_alternative(rule, {});
  add_alternative(rule, concat({item, ref(rule)}));
  return ref(rule);
}

Sequence Grammar::optional(const Sequence& item, const std::string& name) { return ref(rule_of(name, {{}, item})); }

// item{min,max} as min copies of item, then either item* (max unbounded) or a chain of
// max - min nested optionals: O_k ::= "" | item O_{k-1}, which stays linear in max - min.
Sequence Grammar::repeat(const Sequence& item, int64_t min, int64_t max, const std::string& name) {
  constexpr int64_t kMaxRepeat = 4096;
  if (min < 0 || (max >= 0 && max < min)) throw StructuredError("a repetition has bounds {" + std::to_string(min) + "," + std::to_string(max) + "}");
  if (min > kMaxRepeat || max > kMaxRepeat) {
    throw StructuredError("a repetition bound above " + std::to_string(kMaxRepeat) + " is not supported");
  }
  // Charged before the copies exist: chained repeats multiply (a{4096}{4096}{4096}).
  spend(static_cast<int64_t>(item.size()) * min);
  Sequence out;
  out.reserve(item.size() * static_cast<size_t>(min) + 1);
  for (int64_t i = 0; i < min; ++i) append(out, item);
  if (max < 0) {
    append(out, star(item, name));
    return out;
  }
  Sequence tail;  // "" for k = 0
  for (int64_t k = 1; k <= max - min; ++k) {
    const int32_t rule = add_rule(name + "_" + std::to_string(k));
    add_alternative(rule, {});
    add_alternative(rule, concat({item, tail}));
    tail = ref(rule);
  }
  append(out, tail);
  return out;
}

// The matcher expands a rule by pushing its alternatives until each stack's top is a byte set; a
// rule that can reach itself without consuming a byte (left recursion, possibly through
// nullable rules) would expand forever. Refused here, with the rule's name.
// Which rules can match the empty string, in one pass: an alternative without byte sets waits
// for its rule references to become nullable; each rule that does wakes the alternatives that
// refer to it (a chain of N rules took N passes of the whole grammar before).
std::vector<bool> Grammar::nullable_rules() const {
  const size_t n = rule_starts_.size();
  std::vector<bool> nullable(n, false);
  std::vector<int32_t> waiting;                  // [alternative] rule references not yet nullable
  std::vector<int32_t> owner;                    // [alternative] its rule
  std::vector<std::vector<int32_t>> users(n);    // [rule] alternatives referring to it, once per reference
  std::vector<int32_t> work;
  auto become_nullable = [&](int32_t r) {
    if (nullable[static_cast<size_t>(r)]) return;
    nullable[static_cast<size_t>(r)] = true;
    work.push_back(r);
  };
  for (size_t r = 0; r < n; ++r) {
    for (int32_t start : rule_starts_[r]) {
      const auto alt = static_cast<int32_t>(waiting.size());
      int32_t refs = 0;
      bool has_bytes = false;
      for (int32_t p = start; elements_[static_cast<size_t>(p)].kind != Element::kEnd; ++p) {
        const Element& e = elements_[static_cast<size_t>(p)];
        if (e.kind == Element::kBytes) has_bytes = true;
        else ++refs;
      }
      waiting.push_back(has_bytes ? -1 : refs);  // -1: never nullable
      owner.push_back(static_cast<int32_t>(r));
      if (has_bytes) continue;
      for (int32_t p = start; elements_[static_cast<size_t>(p)].kind != Element::kEnd; ++p) {
        users[static_cast<size_t>(elements_[static_cast<size_t>(p)].index)].push_back(alt);
      }
      if (refs == 0) become_nullable(static_cast<int32_t>(r));
    }
  }
  while (!work.empty()) {
    const int32_t r = work.back();
    work.pop_back();
    for (int32_t alt : users[static_cast<size_t>(r)]) {
      if (--waiting[static_cast<size_t>(alt)] == 0) become_nullable(owner[static_cast<size_t>(alt)]);
    }
  }
  return nullable;
}

void Grammar::check_left_recursion() const {
  const size_t n = rule_starts_.size();
  const std::vector<bool> nullable = nullable_rules();
  // first[r]: the rules r may expand to before consuming a byte.
  std::vector<std::vector<int32_t>> first(n);
  for (size_t r = 0; r < n; ++r) {
    for (int32_t start : rule_starts_[r]) {
      for (int32_t p = start; elements_[static_cast<size_t>(p)].kind == Element::kRule; ++p) {
        const int32_t callee = elements_[static_cast<size_t>(p)].index;
        first[r].push_back(callee);
        if (!nullable[static_cast<size_t>(callee)]) break;
      }
    }
  }
  // Depth-first search for a cycle (0 new, 1 on the path, 2 done).
  std::vector<uint8_t> mark(n, 0);
  std::vector<std::pair<int32_t, size_t>> stack;
  for (size_t s = 0; s < n; ++s) {
    if (mark[s] != 0) continue;
    stack.push_back({static_cast<int32_t>(s), 0});
    mark[s] = 1;
    while (!stack.empty()) {
      auto& [r, next] = stack.back();
      const auto& callees = first[static_cast<size_t>(r)];
      if (next == callees.size()) {
        mark[static_cast<size_t>(r)] = 2;
        stack.pop_back();
        continue;
      }
      const int32_t c = callees[next++];
      if (mark[static_cast<size_t>(c)] == 1) {
        throw StructuredError("the grammar is left-recursive at rule '" + names_[static_cast<size_t>(c)] +
                              "' (it can reach itself without matching a character: left recursion, or a repeated part "
                              "that can match the empty string, as in (a*)*); rewrite it");
      }
      if (mark[static_cast<size_t>(c)] == 0) {
        mark[static_cast<size_t>(c)] = 1;
        stack.push_back({c, 0});
      }
    }
  }
}

void Grammar::finish() {
  if (finished_) return;
  TACHYON_CHECK(root_ >= 0 && root_ < num_rules()) << "internal: grammar without a root";
  for (size_t r = 0; r < rule_starts_.size(); ++r) {
    if (rule_starts_[r].empty()) throw StructuredError("the grammar's rule '" + names_[r] + "' has no alternative");
  }
  check_left_recursion();
  finished_ = true;
}

size_t Grammar::memory_bytes() const {
  size_t bytes = elements_.capacity() * sizeof(Element) + byte_sets_.capacity() * sizeof(ByteSet) +
                 byte_set_ids_.size() * (sizeof(ByteSet) + 32) + rule_starts_.capacity() * sizeof(rule_starts_[0]) +
                 names_.capacity() * sizeof(std::string);
  for (const auto& starts : rule_starts_) bytes += starts.capacity() * sizeof(int32_t);
  for (const std::string& name : names_) bytes += name.capacity() > 15 ? name.capacity() + 1 : 0;
  return bytes;
}

namespace {

std::string byte_text(int b, bool in_class) {
  if (b == '"' || b == '\\' || (in_class && (b == ']' || b == '-' || b == '^'))) return std::string("\\") + static_cast<char>(b);
  if (b >= 0x20 && b < 0x7f) return std::string(1, static_cast<char>(b));
  char buf[8];
  std::snprintf(buf, sizeof(buf), "\\x%02x", b);
  return buf;
}

std::string set_text(const ByteSet& set) {
  std::vector<int> members;
  for (int b = 0; b < 256; ++b) {
    if (set.test(static_cast<uint8_t>(b))) members.push_back(b);
  }
  if (members.size() == 1) return "\"" + byte_text(members[0], false) + "\"";
  std::string out = "[";
  for (size_t i = 0; i < members.size();) {
    size_t j = i;
    while (j + 1 < members.size() && members[j + 1] == members[j] + 1) ++j;
    out += byte_text(members[i], true);
    if (j > i) out += "-" + byte_text(members[j], true);
    i = j + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::to_ebnf() const {
  std::string out;
  std::vector<int32_t> order{root_};
  for (int32_t r = 0; r < num_rules(); ++r) {
    if (r != root_) order.push_back(r);
  }
  auto name = [&](int32_t r) { return r == root_ ? std::string("root") : names_[static_cast<size_t>(r)] + "_r" + std::to_string(r); };
  for (int32_t r : order) {
    out += name(r) + " ::= ";
    const auto& alts = rule_starts_[static_cast<size_t>(r)];
    for (size_t a = 0; a < alts.size(); ++a) {
      if (a > 0) out += " | ";
      std::string seq;
      for (int32_t p = alts[a]; elements_[static_cast<size_t>(p)].kind != Element::kEnd; ++p) {
        const Element& e = elements_[static_cast<size_t>(p)];
        if (!seq.empty()) seq += " ";
        seq += e.kind == Element::kBytes ? set_text(byte_sets_[static_cast<size_t>(e.index)]) : name(e.index);
      }
      out += seq.empty() ? "\"\"" : "(" + seq + ")";
    }
    out += "\n";
  }
  return out;
}

}  // namespace tachyon::structured
