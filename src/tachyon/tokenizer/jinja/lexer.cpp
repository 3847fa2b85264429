// Lexer with jinja2's whitespace control; see lexer.h. Rule order inside a tag follows
// jinja2: end tag (only when brackets are balanced), whitespace, float, integer, name, string,
// operator.
#include "tachyon/tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/jinja/py_string.h"

namespace tachyon::tokenizer::jinja {
namespace {

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  return out;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Python's str.rstrip() on the text before a `{%-` tag.
std::string rstrip_all(const std::string& text) { return py_strip(text, std::nullopt, false, true); }

// Python's `\s+` fullmatch on the tail of a line (spaces, tabs and Unicode spaces).
bool all_whitespace(std::string_view text) {
  if (text.empty()) return false;
  for (char32_t c : decode_utf8(text)) {
    if (!py_isspace(c)) return false;
  }
  return true;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {
    // keep_trailing_newline=False: one trailing newline of the template is dropped.
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit(TokenType::kText, src_.substr(pos_), pos_);
        break;
      }
      char kind = src_[tag + 1];  // '%', '{' or '#'
      char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign != '-' && sign != '+') sign = '\0';
      std::string text = src_.substr(pos_, tag - pos_);
      size_t raw_end = kind == '%' ? match_raw_begin(tag) : std::string::npos;
      text = apply_left_strip(text, sign, kind != '{', line_starting);
      if (!text.empty()) emit(TokenType::kText, text, pos_);
      if (raw_end != std::string::npos) {
        pos_ = raw_end;
        line_starting = lex_raw_body();
        continue;
      }
      pos_ = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        line_starting = skip_comment(tag);
      } else {
        line_starting = lex_tag(kind == '%', tag);
      }
    }
    tokens_.push_back(Token{TokenType::kEof, "", line_of(src_.size()), column_of(src_.size())});
    return std::move(tokens_);
  }

 private:
  int line_of(size_t pos) const {
    return static_cast<int>(std::upper_bound(line_starts_.begin(), line_starts_.end(), pos) -
                            line_starts_.begin());
  }
  int column_of(size_t pos) const { return static_cast<int>(pos - line_starts_[line_of(pos) - 1]) + 1; }

  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    TACHYON_FAIL() << "syntax error at line " << line_of(pos) << ", column " << column_of(pos)
                   << ": " << what;
    throw;  // unreachable: the failure above throws
  }

  void emit(TokenType type, std::string value, size_t pos) {
    tokens_.push_back(Token{type, std::move(value), line_of(pos), column_of(pos)});
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '%' || src_[i + 1] == '{' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  // jinja2's lstrip_blocks and `-` handling of the text before a tag.
  static std::string apply_left_strip(const std::string& text, char sign, bool block_or_comment,
                                      bool line_starting) {
    if (sign == '-') return rstrip_all(text);
    if (sign == '+' || !block_or_comment) return text;
    size_t line_pos = text.rfind('\n');
    line_pos = line_pos == std::string::npos ? 0 : line_pos + 1;
    if ((line_pos > 0 || line_starting) && all_whitespace(std::string_view(text).substr(line_pos))) {
      return text.substr(0, line_pos);
    }
    return text;
  }

  size_t skip_spaces(size_t p) const {
    while (p < src_.size() && is_space(src_[p])) ++p;
    return p;
  }

  // Matches the end of a block or comment: `+X}`, `-X}` + whitespace, or `X}` + one newline
  // (trim_blocks). Returns the position after it, or npos.
  size_t match_block_end(size_t p, char mark) const {
    auto at = [&](size_t q, char a, char b) {
      return q + 1 < src_.size() && src_[q] == a && src_[q + 1] == b;
    };
    if (p < src_.size() && src_[p] == '+' && at(p + 1, mark, '}')) return p + 3;
    if (p < src_.size() && src_[p] == '-' && at(p + 1, mark, '}')) return skip_spaces(p + 3);
    if (at(p, mark, '}')) return p + 2 < src_.size() && src_[p + 2] == '\n' ? p + 3 : p + 2;
    return std::string::npos;
  }

  // `{% raw %}` (with optional -/+): returns the position after the tag, or npos.
  size_t match_raw_begin(size_t tag) const {
    size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_spaces(p);
    if (src_.compare(p, 3, "raw") != 0) return std::string::npos;
    p = skip_spaces(p + 3);
    if (src_.compare(p, 3, "-%}") == 0) return skip_spaces(p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  bool lex_raw_body() {
    for (size_t tag = src_.find("{%", pos_); tag != std::string::npos; tag = src_.find("{%", tag + 1)) {
      size_t p = tag + 2;
      char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : '\0';
      if (sign) ++p;
      p = skip_spaces(p);
      if (src_.compare(p, 6, "endraw") != 0) continue;
      size_t end = match_block_end(skip_spaces(p + 6), '%');
      if (end == std::string::npos) continue;
      std::string text = apply_left_strip(src_.substr(pos_, tag - pos_), sign, true, false);
      if (!text.empty()) emit(TokenType::kText, text, pos_);
      pos_ = end;
      return src_[end - 1] == '\n';
    }
    fail(pos_, "missing end of raw directive");
  }

  bool skip_comment(size_t tag) {
    for (size_t p = pos_; p < src_.size(); ++p) {
      size_t end = match_block_end(p, '#');
      if (end != std::string::npos) {
        pos_ = end;
        return src_[end - 1] == '\n';
      }
    }
    fail(tag, "missing end of comment tag");
  }

  bool lex_tag(bool is_block, size_t tag) {
    emit(is_block ? TokenType::kBlockBegin : TokenType::kVarBegin, "", tag);
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) fail(tag, std::string("unexpected end of template, expected '") +
                                             (is_block ? "%}" : "}}") + "'");
      if (balance.empty()) {
        size_t end = is_block ? match_block_end(pos_, '%') : match_var_end(pos_);
        if (end != std::string::npos) {
          emit(is_block ? TokenType::kBlockEnd : TokenType::kVarEnd, "", pos_);
          pos_ = end;
          return src_[end - 1] == '\n';
        }
      }
      char c = src_[pos_];
      if (is_space(c)) {
        ++pos_;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number();
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t start = pos_;
        while (pos_ < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) ++pos_;
        emit(TokenType::kName, src_.substr(start, pos_ - start), start);
      } else if (c == '\'' || c == '"') {
        lex_string();
      } else {
        lex_operator(balance);
      }
    }
  }

  size_t match_var_end(size_t p) const {
    if (src_.compare(p, 3, "-}}") == 0) return skip_spaces(p + 3);
    if (src_.compare(p, 2, "}}") == 0) return p + 2;
    return std::string::npos;
  }

  void lex_number() {
    size_t start = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[pos_])) ||
                                    (src_[pos_] == '_' && pos_ + 1 < src_.size() &&
                                     std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))))) {
        ++pos_;
      }
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        pos_ = p;
        digits();
      }
    }
    std::string text = src_.substr(start, pos_ - start);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    emit(is_float ? TokenType::kFloat : TokenType::kInteger, text, start);
  }

  // Python "unicode-escape" decoding of a string literal's body.
  void lex_string() {
    size_t start = pos_;
    char quote = src_[pos_++];
    std::string value;
    while (true) {
      if (pos_ >= src_.size()) fail(start, "unterminated string literal");
      char c = src_[pos_];
      if (c == quote) { ++pos_; break; }
      if (c != '\\') { value += c; ++pos_; continue; }
      if (pos_ + 1 >= src_.size()) fail(start, "unterminated string literal");
      char e = src_[pos_ + 1];
      pos_ += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\n': break;  // line continuation
        case 'x': append_utf8(value, read_hex(2, start)); break;
        case 'u': append_utf8(value, read_hex(4, start)); break;
        case 'U': append_utf8(value, read_hex(8, start)); break;
        default:
          if (e >= '0' && e <= '7') {
            unsigned v = e - '0';
            for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++k) {
              v = v * 8 + (src_[pos_++] - '0');
            }
            append_utf8(value, v);
          } else {
            value += '\\';  // unknown escapes stay as written, as in Python
            value += e;
          }
      }
    }
    emit(TokenType::kString, value, start);
  }

  char32_t read_hex(int count, size_t start) {
    char32_t v = 0;
    for (int k = 0; k < count; ++k, ++pos_) {
      if (pos_ >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[pos_]))) {
        fail(start, "truncated \\x/\\u escape in string literal");
      }
      char c = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos_])));
      v = v * 16 + (c <= '9' ? c - '0' : c - 'a' + 10);
    }
    return v;
  }

  void lex_operator(std::vector<char>& balance) {
    static const char* kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        emit(TokenType::kOperator, op, pos_);
        pos_ += 2;
        return;
      }
    }
    char c = src_[pos_];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      fail(pos_, std::string("unexpected char '") + c + "'");
    }
    if (c == '(' || c == '[' || c == '{') balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(pos_, std::string("unexpected '") + c + "'");
      if (balance.back() != c) fail(pos_, std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
      balance.pop_back();
    }
    emit(TokenType::kOperator, std::string(1, c), pos_);
    ++pos_;
  }

  std::string src_;
  size_t pos_ = 0;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace tachyon::tokenizer::jinja
