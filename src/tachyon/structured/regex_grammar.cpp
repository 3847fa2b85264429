#include "tachyon/structured/regex_grammar.h"

#include <limits>

#include "tachyon/structured/utf8_ranges.h"

namespace tachyon::structured {
namespace {

class RegexParser {
 public:
  RegexParser(Grammar& grammar, std::string_view pattern, RegexContext context, std::string what)
      : g_(grammar), p_(pattern), context_(context), what_(std::move(what)) {}

  Sequence parse() {
    if (peek('^')) ++i_;
    Sequence out = alternation(0);
    if (i_ < p_.size()) fail("unbalanced ')'");
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw StructuredError(what_ + ": " + message + " at offset " + std::to_string(i_) + " of the regex '" +
                          std::string(p_) + "'");
  }
  bool peek(char c) const { return i_ < p_.size() && p_[i_] == c; }
  bool at_end() const { return i_ >= p_.size(); }

  std::string name() { return "regex_" + std::to_string(counter_++); }

  Sequence alternation(int depth) {
    if (depth > 200) fail("groups nest too deeply");
    std::vector<Sequence> alternatives{concatenation(depth)};
    while (peek('|')) {
      ++i_;
      alternatives.push_back(concatenation(depth));
    }
    if (alternatives.size() == 1) return alternatives[0];
    return Grammar::ref(g_.rule_of(name(), alternatives));
  }

  Sequence concatenation(int depth) {
    Sequence out;
    while (!at_end() && !peek('|') && !peek(')')) {
      if (peek('$')) {
        ++i_;
        if (!at_end() && !peek(')') && !peek('|')) fail("'$' is supported only at the end");
        continue;
      }
      append(out, quantified(depth));
    }
    return out;
  }

  Sequence quantified(int depth) {
    Sequence item = atom(depth);
    while (!at_end()) {
      int64_t lo = 0, hi = -1;
      if (peek('*')) {
        ++i_;
      } else if (peek('+')) {
        ++i_;
        lo = 1;
      } else if (peek('?')) {
        ++i_;
        hi = 1;
      } else if (peek('{') && bounds(lo, hi)) {
      } else {
        break;
      }
      if (peek('?')) ++i_;  // lazy: same language
      else if (peek('+')) fail("possessive quantifiers are not supported");
      item = g_.repeat(item, lo, hi, name());
    }
    return item;
  }

  // {n}, {n,}, {n,m}; false (nothing consumed) when '{' does not start a quantifier.
  bool bounds(int64_t& lo, int64_t& hi) {
    size_t j = i_ + 1;
    auto number = [&](int64_t& out) {
      const size_t start = j;
      out = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        out = out * 10 + (p_[j] - '0');
        if (out > 100000) fail("a repetition bound is too large");
        ++j;
      }
      return j > start;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!number(hi)) hi = -1;
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    i_ = j + 1;
    if (hi >= 0 && hi < lo) fail("a repetition {n,m} has m < n");
    return true;
  }

  uint32_t next_codepoint() {
    const std::optional<uint32_t> cp = utf8_decode_next(p_, i_);
    if (!cp) fail("invalid UTF-8");
    return *cp;
  }

  uint32_t hex(size_t digits) {
    if (i_ + digits > p_.size()) fail("a truncated hex escape");
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      const int digit = hex_digit_value(p_[i_++]);
      if (digit < 0) fail("a bad hex digit");
      v = (v << 4) | static_cast<uint32_t>(digit);
    }
    return v;
  }

  // After '\': a class (\d ...) into `ranges`, or one code point. Returns true for a class.
  bool escape(CodepointRanges& ranges, uint32_t& cp) {
    if (at_end()) fail("a trailing backslash");
    const char c = p_[i_++];
    auto cls = [&](CodepointRanges r, bool negate) {
      ranges = negate ? complement_ranges(r) : r;
      return true;
    };
    switch (c) {
      case 'd': return cls({{'0', '9'}}, false);
      case 'D': return cls({{'0', '9'}}, true);
      case 'w': return cls({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}, false);
      case 'W': return cls({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}, true);
      case 's': return cls({{'\t', '\r'}, {' ', ' '}}, false);
      case 'S': return cls({{'\t', '\r'}, {' ', ' '}}, true);
      case 'n': cp = '\n'; return false;
      case 't': cp = '\t'; return false;
      case 'r': cp = '\r'; return false;
      case 'f': cp = '\f'; return false;
      case 'v': cp = '\v'; return false;
      case '0': cp = 0; return false;
      case 'x': cp = hex(2); return false;
      case 'u': cp = hex(4); return false;
      case 'b': case 'B': --i_; fail("word boundaries (\\b, \\B) are not supported");
      default:
        if ((c >= '1' && c <= '9') || c == 'k') {
          --i_;
          fail("backreferences are not supported");
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          --i_;
          fail(std::string("the escape \\") + c + " is not supported");
        }
        cp = static_cast<uint8_t>(c);
        return false;
    }
  }

  Sequence char_class(CodepointRanges ranges) {
    if (context_ == RegexContext::kJsonString) {
      // Keep what a JSON string may hold unescaped: no control characters, '"' or '\'.
      CodepointRanges kept;
      for (auto [lo, hi] : normalize_ranges(ranges)) {
        auto keep = [&](uint32_t a, uint32_t b) {
          a = std::max(a, lo);
          b = std::min(b, hi);
          if (a <= b) kept.push_back({a, b});
        };
        keep(0x20, 0x21);
        keep(0x23, 0x5B);
        keep(0x5D, kMaxCodepoint);
      }
      if (kept.empty()) fail("this part matches only characters a JSON string must escape (control characters, '\"', '\\')");
      ranges = kept;
    }
    return utf8_class(g_, ranges, name());
  }

  Sequence bracket() {
    ++i_;  // '['
    bool negate = false;
    if (peek('^')) {
      negate = true;
      ++i_;
    }
    CodepointRanges ranges;
    bool first = true;
    while (!at_end() && (first || !peek(']'))) {
      first = false;
      uint32_t lo = 0;
      if (peek('\\')) {
        ++i_;
        CodepointRanges inner;
        if (escape(inner, lo)) {
          ranges.insert(ranges.end(), inner.begin(), inner.end());
          continue;
        }
      } else if (peek('[') && i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
        fail("POSIX classes ([:alpha:]) are not supported");
      } else {
        lo = next_codepoint();
      }
      uint32_t hi = lo;
      if (peek('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        if (peek('\\')) {
          ++i_;
          CodepointRanges inner;
          if (escape(inner, hi)) fail("a class cannot end a range");
        } else {
          hi = next_codepoint();
        }
        if (hi < lo) fail("a range in a class goes backwards");
      }
      ranges.push_back({lo, hi});
    }
    if (!peek(']')) fail("an unterminated '['");
    ++i_;
    return char_class(negate ? complement_ranges(ranges) : ranges);
  }

  Sequence atom(int depth) {
    const char c = p_[i_];
    switch (c) {
      case '(': {
        ++i_;
        if (peek('?')) {
          if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
            i_ += 2;
          } else if (i_ + 1 < p_.size() && p_[i_ + 1] == 'P' && i_ + 2 < p_.size() && p_[i_ + 2] == '<') {
            const size_t close = p_.find('>', i_);
            if (close == std::string_view::npos) fail("an unterminated group name");
            i_ = close + 1;
          } else if (i_ + 1 < p_.size() && p_[i_ + 1] == '<' && i_ + 2 < p_.size() && p_[i_ + 2] != '=' && p_[i_ + 2] != '!') {
            const size_t close = p_.find('>', i_);
            if (close == std::string_view::npos) fail("an unterminated group name");
            i_ = close + 1;
          } else {
            fail("lookaround and inline flags ((?=, (?!, (?<=, (?i) ...) are not supported");
          }
        }
        Sequence inner = alternation(depth + 1);
        if (!peek(')')) fail("an unterminated '('");
        ++i_;
        // A group becomes its own rule so a quantifier after it repeats it as one item.
        return Grammar::ref(g_.rule_of(name(), {inner}));
      }
      case '[':
        return bracket();
      case '.':
        ++i_;
        return char_class({{0, '\n' - 1}, {'\n' + 1, kMaxCodepoint}});
      case '\\': {
        ++i_;
        CodepointRanges ranges;
        uint32_t cp = 0;
        if (escape(ranges, cp)) return char_class(ranges);
        return char_class({{cp, cp}});
      }
      case '*': case '+': case '?': fail("a quantifier with nothing to repeat");
      case '{': {
        int64_t lo = 0, hi = 0;
        const size_t save = i_;
        if (bounds(lo, hi)) {
          i_ = save;
          fail("a quantifier with nothing to repeat");
        }
        ++i_;
        return char_class({{'{', '{'}});
      }
      case '^': fail("'^' is supported only at the start");
      default: {
        const uint32_t cp = next_codepoint();
        return char_class({{cp, cp}});
      }
    }
  }

  Grammar& g_;
  std::string_view p_;
  RegexContext context_;
  std::string what_;
  size_t i_ = 0;
  int counter_ = 0;
};

}  // namespace

Sequence compile_regex(Grammar& grammar, std::string_view pattern, RegexContext context, const std::string& what) {
  return RegexParser(grammar, pattern, context, what).parse();
}

}  // namespace tachyon::structured
