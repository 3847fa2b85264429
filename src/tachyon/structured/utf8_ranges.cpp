#include "tachyon/structured/utf8_ranges.h"

#include <algorithm>

#include "tachyon/tokenizer/unicode.h"

namespace tachyon::structured {

std::string utf8_encode(uint32_t cp) {
  // Past U+10FFFF utf8_append writes bytes no token holds (0xFF among them): the parsers refuse
  // such code points with their position; this is the backstop.
  if (cp > kMaxCodepoint) throw StructuredError("a code point is beyond U+10FFFF");
  std::string out;
  tokenizer::utf8_append(out, static_cast<char32_t>(cp));
  return out;
}

std::optional<uint32_t> utf8_decode_next(std::string_view text, size_t& pos) {
  const auto c = static_cast<uint8_t>(text[pos]);
  const int length = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (length == 0 || pos + static_cast<size_t>(length) > text.size()) return std::nullopt;
  uint32_t cp = length == 1 ? c : c & (0x7F >> length);
  for (int k = 1; k < length; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text[pos + static_cast<size_t>(k)]) & 0x3F);
  pos += static_cast<size_t>(length);
  return cp;
}

int hex_digit_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

CodepointRanges normalize_ranges(CodepointRanges ranges) {
  CodepointRanges cut;
  for (auto [lo, hi] : ranges) {
    hi = std::min(hi, kMaxCodepoint);
    if (lo > hi) continue;
    // Surrogates D800-DFFF have no UTF-8 encoding.
    if (lo < 0xD800 && hi >= 0xD800) {
      cut.push_back({lo, 0xD7FF});
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      if (hi > 0xDFFF) cut.push_back({0xE000, hi});
    } else {
      cut.push_back({lo, hi});
    }
  }
  std::sort(cut.begin(), cut.end());
  CodepointRanges merged;
  for (auto r : cut) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

CodepointRanges complement_ranges(const CodepointRanges& ranges) {
  const CodepointRanges in = normalize_ranges(ranges);
  CodepointRanges out;
  uint32_t next = 0;
  for (auto [lo, hi] : in) {
    if (lo > next) out.push_back({next, lo - 1});
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
  return normalize_ranges(out);
}

namespace {

constexpr uint32_t kMaxForLength[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};

// Appends to `out` byte-range sequences (one ByteSet per byte) covering [lo, hi], which lies in
// one encoding length and holds no surrogate.
void split(uint32_t lo, uint32_t hi, std::vector<std::vector<ByteSet>>& out) {
  if (lo > hi) return;
  for (int n = 0; n < 3; ++n) {
    if (lo <= kMaxForLength[n] && hi > kMaxForLength[n]) {
      split(lo, kMaxForLength[n], out);
      split(kMaxForLength[n] + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out.push_back({ByteSet::range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi))});
    return;
  }
  const size_t length = utf8_encode(lo).size();
  for (size_t i = 1; i < length; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split(lo, lo | m, out);
        split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        split(lo, (hi & ~m) - 1, out);
        split(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = utf8_encode(lo);
  const std::string b = utf8_encode(hi);
  std::vector<ByteSet> seq;
  for (size_t i = 0; i < a.size(); ++i) seq.push_back(ByteSet::range(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i])));
  out.push_back(std::move(seq));
}

}  // namespace

Sequence utf8_class(Grammar& grammar, const CodepointRanges& ranges, const std::string& name) {
  const CodepointRanges in = normalize_ranges(ranges);
  if (in.empty()) throw StructuredError("the constraint has a character class that matches nothing");
  ByteSet ascii;
  std::vector<std::vector<ByteSet>> multi;
  for (auto [lo, hi] : in) {
    if (lo < 0x80) ascii.set_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(std::min<uint32_t>(hi, 0x7F)));
    if (hi >= 0x80) split(std::max<uint32_t>(lo, 0x80), hi, multi);
  }
  if (multi.empty()) return grammar.bytes(ascii);
  // Merge sequences that differ only in their first byte set (common after the split), so the
  // rule has few alternatives and the matcher few stacks.
  std::vector<std::vector<ByteSet>> merged;
  for (auto& seq : multi) {
    bool done = false;
    for (auto& m : merged) {
      if (m.size() != seq.size() || !std::equal(m.begin() + 1, m.end(), seq.begin() + 1)) continue;
      for (int w = 0; w < 4; ++w) m[0].bits[static_cast<size_t>(w)] |= seq[0].bits[static_cast<size_t>(w)];
      done = true;
      break;
    }
    if (!done) merged.push_back(std::move(seq));
  }
  std::vector<Sequence> alternatives;
  if (!ascii.empty()) alternatives.push_back(grammar.bytes(ascii));
  for (const auto& seq : merged) {
    Sequence s;
    for (const ByteSet& b : seq) append(s, grammar.bytes(b));
    alternatives.push_back(std::move(s));
  }
  return Grammar::ref(grammar.rule_of(name, alternatives));
}

}  // namespace tachyon::structured
