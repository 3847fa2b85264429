#include "tachyon/structured/ebnf.h"

#include <cstdio>
#include <map>

#include "tachyon/structured/utf8_ranges.h"

namespace tachyon::structured {
namespace {

class EbnfParser {
 public:
  EbnfParser(std::string_view text, std::string what) : t_(text), what_(std::move(what)) {}

  Grammar parse() {
    skip_space(true);
    while (!at_end()) {
      const std::string name = identifier();
      if (name.empty()) fail("a rule name was expected");
      skip_space(true);
      if (t_.substr(i_, 3) != "::=") fail("'::=' was expected after '" + name + "'");
      i_ += 3;
      const int32_t rule = rule_id(name);
      if (defined_.count(name)) fail("the rule '" + name + "' is defined twice");
      defined_[name] = true;
      for (const Sequence& alt : alternatives(0)) g_.add_alternative(rule, alt);
      skip_space(true);
    }
    for (const auto& [name, id] : ids_) {
      if (!defined_.count(name)) fail("the rule '" + name + "' is used but not defined");
    }
    const auto root = ids_.find("root");
    if (root == ids_.end()) fail("there is no rule named 'root'");
    g_.set_root(root->second);
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    int line = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) line += t_[k] == '\n';
    throw StructuredError(what_ + ": " + message + " (line " + std::to_string(line) + ")");
  }
  bool at_end() const { return i_ >= t_.size(); }
  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
  }
  // Skips blanks and comments; newlines too when `newlines` (inside a rule a newline may end it,
  // but only a following "name ::=" really does, so newlines are skipped everywhere).
  void skip_space(bool /*newlines*/) {
    while (!at_end()) {
      const char c = t_[i_];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++i_;
      } else if (c == '#') {
        while (!at_end() && t_[i_] != '\n') ++i_;
      } else {
        break;
      }
    }
  }
  std::string identifier() {
    const size_t start = i_;
    while (!at_end() && name_char(t_[i_])) ++i_;
    return std::string(t_.substr(start, i_ - start));
  }
  // An identifier followed by ::= starts the next rule.
  bool at_rule_start() {
    const size_t save = i_;
    const std::string name = identifier();
    skip_space(true);
    const bool yes = !name.empty() && t_.substr(i_, 3) == "::=";
    i_ = save;
    return yes;
  }
  int32_t rule_id(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const int32_t id = g_.add_rule(name);
    ids_.emplace(name, id);
    return id;
  }

  std::vector<Sequence> alternatives(int depth) {
    if (depth > 200) fail("groups nest too deeply");
    std::vector<Sequence> out{sequence(depth)};
    while (!at_end() && t_[i_] == '|') {
      ++i_;
      out.push_back(sequence(depth));
    }
    return out;
  }

  Sequence sequence(int depth) {
    Sequence out;
    while (true) {
      skip_space(true);
      if (at_end() || t_[i_] == '|' || t_[i_] == ')' || at_rule_start()) break;
      Sequence item = primary(depth);
      while (!at_end()) {
        const char c = t_[i_];
        int64_t lo = 0, hi = -1;
        if (c == '*') {
          ++i_;
        } else if (c == '+') {
          ++i_;
          lo = 1;
        } else if (c == '?') {
          ++i_;
          hi = 1;
        } else if (c == '{') {
          ++i_;
          lo = number();
          hi = lo;
          if (!at_end() && t_[i_] == ',') {
            ++i_;
            skip_space(false);
            hi = (!at_end() && t_[i_] == '}') ? -1 : number();
          }
          if (at_end() || t_[i_] != '}') fail("'}' was expected");
          ++i_;
        } else {
          break;
        }
        item = g_.repeat(item, lo, hi, "repeat");
      }
      append(out, item);
    }
    return out;
  }

  int64_t number() {
    skip_space(false);
    const size_t start = i_;
    int64_t v = 0;
    while (!at_end() && t_[i_] >= '0' && t_[i_] <= '9') {
      v = v * 10 + (t_[i_++] - '0');
      if (v > 100000) fail("a repetition bound is too large");
    }
    if (i_ == start) fail("a number was expected");
    skip_space(false);
    return v;
  }

  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      if (at_end()) fail("a truncated escape");
      const int digit = hex_digit_value(t_[i_++]);
      if (digit < 0) fail("a bad hex digit");
      v = (v << 4) | static_cast<uint32_t>(digit);
    }
    return v;
  }

  // \U's eight hex digits reach past Unicode, whose last code point is U+10FFFF; UTF-8 has no
  // form for those (utf8_encode would write a byte no token holds, and nothing could match).
  uint32_t in_unicode(uint32_t cp) const {
    if (cp > kMaxCodepoint) fail("the code point " + code_point_name(cp) + " is beyond U+10FFFF");
    return cp;
  }
  static std::string code_point_name(uint32_t cp) {
    char buf[16];
    std::snprintf(buf, sizeof(buf), "U+%04X", cp);
    return buf;
  }

  uint32_t codepoint() {
    if (at_end()) fail("an unterminated literal");
    const auto c = static_cast<uint8_t>(t_[i_]);
    if (c == '\\') {
      ++i_;
      if (at_end()) fail("a trailing backslash");
      const char e = t_[i_++];
      switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '0': return 0;
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return in_unicode(hex(8));
        default: return static_cast<uint8_t>(e);
      }
    }
    const std::optional<uint32_t> cp = utf8_decode_next(t_, i_);
    if (!cp) fail("invalid UTF-8");
    return *cp;
  }

  Sequence primary(int depth) {
    const char c = t_[i_];
    if (c == '"') {
      ++i_;
      std::string bytes;
      while (!at_end() && t_[i_] != '"') {
        const uint32_t cp = codepoint();
        // A class drops surrogates (normalize_ranges); a literal one would be invalid UTF-8.
        if (cp >= 0xD800 && cp <= 0xDFFF) {
          fail("the code point " + code_point_name(cp) + " is a surrogate, which UTF-8 cannot encode");
        }
        bytes += utf8_encode(cp);
      }
      if (at_end()) fail("an unterminated string");
      ++i_;
      return g_.literal(bytes);
    }
    if (c == '[') {
      ++i_;
      bool negate = false;
      if (!at_end() && t_[i_] == '^') {
        negate = true;
        ++i_;
      }
      CodepointRanges ranges;
      while (!at_end() && t_[i_] != ']') {
        const uint32_t lo = codepoint();
        uint32_t hi = lo;
        if (!at_end() && t_[i_] == '-' && i_ + 1 < t_.size() && t_[i_ + 1] != ']') {
          ++i_;
          hi = codepoint();
          if (hi < lo) fail("a range in a class goes backwards");
        }
        ranges.push_back({lo, hi});
      }
      if (at_end()) fail("an unterminated '['");
      ++i_;
      return utf8_class(g_, negate ? complement_ranges(ranges) : ranges, "class");
    }
    if (c == '(') {
      ++i_;
      skip_space(true);
      if (!at_end() && t_[i_] == '=') fail("lookahead assertions (=...) are not supported");
      std::vector<Sequence> alts = alternatives(depth + 1);
      skip_space(true);
      if (at_end() || t_[i_] != ')') fail("')' was expected");
      ++i_;
      return Grammar::ref(g_.rule_of("group", alts));
    }
    const std::string name = identifier();
    if (name.empty()) fail(std::string("unexpected '") + c + "'");
    return Grammar::ref(rule_id(name));
  }

  std::string_view t_;
  std::string what_;
  size_t i_ = 0;
  Grammar g_;
  std::map<std::string, int32_t> ids_;
  std::map<std::string, bool> defined_;
};

}  // namespace

Grammar ebnf_grammar(std::string_view text, const std::string& what) { return EbnfParser(text, what).parse(); }

}  // namespace tachyon::structured
