// Python str semantics on UTF-8 text; see py_string.h for why code points matter.
#include "tachyon/tokenizer/jinja/py_string.h"

#include "tachyon/base/check.h"
#include "tachyon/tokenizer/unicode.h"

namespace tachyon::tokenizer::jinja {

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : -1;
    if (extra < 0 || i + extra >= text.size() + (extra == 0 ? 1 : 0)) {
      // Invalid UTF-8 keeps its byte as a code point so no text is lost.
      out.push_back(c);
      ++i;
      continue;
    }
    char32_t cp = extra == 0 ? c : (c & (0x3F >> extra));
    bool ok = true;
    for (int k = 1; k <= extra; ++k) {
      unsigned char cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(c);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += extra + 1;
  }
  return out;
}

// One UTF-8 encoder for the whole tokenizer module (unicode.h).
void append_utf8(std::string& out, char32_t cp) { utf8_append(out, cp); }

std::string encode_utf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) append_utf8(out, cp);
  return out;
}

size_t utf8_length(std::string_view text) {
  size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
         c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_strip(std::string_view text, const std::optional<std::string>& chars, bool left,
                     bool right) {
  std::u32string s = decode_utf8(text);
  std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
  };
  size_t begin = 0, end = s.size();
  if (left) while (begin < end && strip_it(s[begin])) ++begin;
  if (right) while (end > begin && strip_it(s[end - 1])) --end;
  return encode_utf8(std::u32string_view(s).substr(begin, end - begin));
}

std::vector<std::string> py_split(std::string_view text, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep) {
    TACHYON_CHECK(!sep->empty()) << "split(): empty separator";
    if (!from_right) {
      size_t pos = 0;
      while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
        size_t hit = text.find(*sep, pos);
        if (hit == std::string_view::npos) break;
        parts.emplace_back(text.substr(pos, hit - pos));
        pos = hit + sep->size();
      }
      parts.emplace_back(text.substr(pos));
      return parts;
    }
    size_t end = text.size();
    std::vector<std::string> reversed;
    while (maxsplit < 0 || static_cast<int64_t>(reversed.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = text.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      reversed.emplace_back(text.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    reversed.emplace_back(text.substr(0, end));
    return {reversed.rbegin(), reversed.rend()};
  }
  // Whitespace split: runs of whitespace separate, leading/trailing whitespace is dropped.
  std::u32string s = decode_utf8(text);
  if (from_right) {
    std::vector<std::string> reversed;
    int64_t i = static_cast<int64_t>(s.size()) - 1;
    while (i >= 0) {
      while (i >= 0 && py_isspace(s[i])) --i;
      if (i < 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(reversed.size()) == maxsplit) {
        reversed.push_back(encode_utf8(std::u32string_view(s).substr(0, i + 1)));
        break;
      }
      int64_t end = i;
      while (i >= 0 && !py_isspace(s[i])) --i;
      reversed.push_back(encode_utf8(std::u32string_view(s).substr(i + 1, end - i)));
    }
    return {reversed.rbegin(), reversed.rend()};
  }
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && py_isspace(s[i])) ++i;
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      size_t end = s.size();
      while (end > i && py_isspace(s[end - 1])) --end;
      parts.push_back(encode_utf8(std::u32string_view(s).substr(i, end - i)));
      break;
    }
    size_t start = i;
    while (i < s.size() && !py_isspace(s[i])) ++i;
    parts.push_back(encode_utf8(std::u32string_view(s).substr(start, i - start)));
  }
  return parts;
}

std::string py_replace(std::string_view text, std::string_view old_text, std::string_view new_text,
                       int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new` before every code point and at the end.
    std::u32string s = decode_utf8(text);
    int64_t done = 0;
    for (char32_t c : s) {
      if (count < 0 || done < count) { out += new_text; ++done; }
      append_utf8(out, c);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = text.find(old_text, pos);
    if (hit == std::string_view::npos) break;
    out += text.substr(pos, hit - pos);
    out += new_text;
    pos = hit + old_text.size();
    ++done;
  }
  out += text.substr(pos);
  return out;
}

std::string py_upper(std::string_view text) {
  std::string out(text);
  for (char& c : out) if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return out;
}

std::string py_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string py_capitalize(std::string_view text) {
  std::string out = py_lower(text);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

std::string py_title(std::string_view text) {
  std::string out(text);
  bool word_start = true;
  for (char& c : out) {
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (alpha) {
      if (word_start && c >= 'a') c = static_cast<char>(c - 'a' + 'A');
      if (!word_start && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    word_start = !(alpha || (c >= '0' && c <= '9') || c == '\'' || (c & 0x80));
  }
  return out;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.substr(0, prefix.size()) == prefix;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::vector<int64_t> slice_indices(int64_t length, std::optional<int64_t> start,
                                   std::optional<int64_t> stop, std::optional<int64_t> step) {
  int64_t st = step.value_or(1);
  TACHYON_CHECK(st != 0) << "slice step cannot be zero";
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += length;
    if (st > 0) return std::min(std::max<int64_t>(x, 0), length);
    return std::min(std::max<int64_t>(x, -1), length - 1);
  };
  int64_t b = clamp(start, st > 0 ? 0 : length - 1);
  int64_t e = clamp(stop, st > 0 ? length : -1);
  std::vector<int64_t> picked;
  if (st > 0) {
    for (int64_t i = b; i < e; i += st) picked.push_back(i);
  } else {
    for (int64_t i = b; i > e; i += st) picked.push_back(i);
  }
  return picked;
}

}  // namespace tachyon::tokenizer::jinja
