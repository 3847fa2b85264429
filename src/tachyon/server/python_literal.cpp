#include "tachyon/server/python_literal.h"

#include <cctype>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace tachyon::server {
namespace {

constexpr int kMaxDepth = 64;

// A recursive-descent reader over the text; every method returns false where the text is no
// literal, and then the whole conversion gives up.
class LiteralReader {
 public:
  explicit LiteralReader(std::string_view text) : text_(text) {}

  std::optional<std::string> read() {
    std::string out;
    skip_space();
    if (!value(out, 0)) return std::nullopt;
    skip_space();
    if (pos_ != text_.size()) return std::nullopt;
    return out;
  }

 private:
  bool value(std::string& out, int depth) {
    if (depth > kMaxDepth || pos_ >= text_.size()) return false;
    const char c = text_[pos_];
    if (c == '{') return dict(out, depth);
    if (c == '[') return sequence(out, depth, ']');
    if (c == '(') return sequence(out, depth, ')');
    if (c == '\'' || c == '"') return string(out);
    if (take_word("True")) return out += "true", true;
    if (take_word("False")) return out += "false", true;
    if (take_word("None")) return out += "null", true;
    return number(out);
  }

  bool dict(std::string& out, int depth) {
    ++pos_;  // '{'
    out += '{';
    skip_space();
    if (take('}')) return out += '}', true;
    while (true) {
      if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"') || !string(out)) return false;
      skip_space();
      if (!take(':')) return false;
      out += ": ";
      skip_space();
      if (!value(out, depth + 1)) return false;
      if (!next_member('}')) return false;
      if (closed_) return out += '}', true;
      out += ", ";
    }
  }

  bool sequence(std::string& out, int depth, char close) {
    ++pos_;  // '[' or '('
    out += '[';
    skip_space();
    if (take(close)) return out += ']', true;
    while (true) {
      if (!value(out, depth + 1)) return false;
      if (!next_member(close)) return false;
      if (closed_) return out += ']', true;
      out += ", ";
    }
  }

  // After a member: `close` (closed_ set), or a comma and then another member or `close` (a
  // trailing comma, as Python allows). False when neither follows.
  bool next_member(char close) {
    skip_space();
    closed_ = take(close);
    if (closed_) return true;
    if (!take(',')) return false;
    skip_space();
    closed_ = take(close);
    return true;
  }

  bool string(std::string& out) {
    const char quote = text_[pos_++];
    std::string decoded;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      const char c = text_[pos_++];
      if (c == '\n') return false;  // a literal of one quote ends on its line
      if (c != '\\') {
        decoded += c;
        continue;
      }
      if (pos_ >= text_.size()) return false;
      const char e = text_[pos_++];
      switch (e) {
        case 'n': decoded += '\n'; break;
        case 't': decoded += '\t'; break;
        case 'r': decoded += '\r'; break;
        case '0': decoded += '\0'; break;
        case '\\': case '\'': case '"': decoded += e; break;
        case 'x': if (!code_point(2, decoded)) return false; break;
        case 'u': if (!code_point(4, decoded)) return false; break;
        case 'U': if (!code_point(8, decoded)) return false; break;
        default: decoded += '\\', decoded += e;  // Python keeps an unknown escape as written
      }
    }
    if (!take(quote)) return false;
    out += nlohmann::json(decoded).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return true;
  }

  // `digits` hex digits, appended as UTF-8.
  bool code_point(int digits, std::string& out) {
    if (pos_ + static_cast<size_t>(digits) > text_.size()) return false;
    uint32_t cp = 0;
    for (int i = 0; i < digits; ++i) {
      const char h = text_[pos_++];
      const int v = h >= '0' && h <= '9'   ? h - '0'
                    : h >= 'a' && h <= 'f' ? h - 'a' + 10
                    : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                           : -1;
      if (v < 0) return false;
      cp = cp * 16 + static_cast<uint32_t>(v);
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return true;
  }

  // A number as JSON writes it: Python's forms that JSON lacks (1., .5, +1, 1_000) are no literal here.
  bool number(std::string& out) {
    const size_t begin = pos_;
    auto in_number = [](char c) {
      return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
    };
    while (pos_ < text_.size() && in_number(text_[pos_])) ++pos_;
    const std::string_view n = text_.substr(begin, pos_ - begin);
    if (n.empty() || !nlohmann::json::accept(n)) return false;
    const nlohmann::json parsed = nlohmann::json::parse(n);
    if (!parsed.is_number()) return false;
    out += n;
    return true;
  }

  bool take(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  bool take_word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    const size_t after = pos_ + word.size();
    if (after < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[after])) || text_[after] == '_')) {
      return false;
    }
    pos_ = after;
    return true;
  }

  void skip_space() {
    while (pos_ < text_.size() && std::string_view(" \n\t\r").find(text_[pos_]) != std::string_view::npos) ++pos_;
  }

  std::string_view text_;
  size_t pos_ = 0;
  bool closed_ = false;  // next_member() found the container's end
};

}  // namespace

std::optional<std::string> python_literal_as_json(std::string_view text) { return LiteralReader(text).read(); }

}  // namespace tachyon::server
