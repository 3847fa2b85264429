#include "tachyon/structured/reasoning_prefix.h"

#include <map>
#include <optional>

namespace tachyon::structured {
namespace {

// Any bytes that do not contain `marker`, then the marker: one rule per matched prefix length j
// (KMP): state j takes a byte b to the longest prefix of the marker that ends the text so far.
Sequence text_through(Grammar& g, const std::string& marker) {
  const size_t k = marker.size();
  std::vector<size_t> fail(k + 1, 0);  // fail[j]: the longest proper border of marker[0, j)
  for (size_t j = 2; j <= k; ++j) {
    size_t f = fail[j - 1];
    while (f > 0 && marker[f] != marker[j - 1]) f = fail[f];
    fail[j] = marker[f] == marker[j - 1] ? f + 1 : 0;
  }
  auto next = [&](size_t j, uint8_t b) {
    while (j > 0 && static_cast<uint8_t>(marker[j]) != b) j = fail[j];
    return static_cast<uint8_t>(marker[j]) == b ? j + 1 : 0;
  };
  std::vector<int32_t> rules(k);
  for (size_t j = 0; j < k; ++j) rules[j] = g.add_rule("reasoning_" + std::to_string(j));
  for (size_t j = 0; j < k; ++j) {
    std::map<size_t, ByteSet> by_target;
    for (int b = 0; b < 256; ++b) by_target[next(j, static_cast<uint8_t>(b))].set(static_cast<uint8_t>(b));
    for (const auto& [target, bytes] : by_target) {
      g.add_alternative(rules[j], target == k ? g.bytes(bytes) : concat({g.bytes(bytes), Grammar::ref(rules[target])}));
    }
  }
  return Grammar::ref(rules[0]);
}

// Any bytes but 0xFF (no marker token's private spelling), then the end marker token.
Sequence text_through_token(Grammar& g, int32_t end_id) {
  const int32_t rule = g.add_rule("reasoning_text");
  ByteSet text;
  for (int b = 0; b < 0xFF; ++b) text.set(static_cast<uint8_t>(b));
  g.add_alternative(rule, concat({g.bytes(text), Grammar::ref(rule)}));
  g.add_alternative(rule, g.literal(TokenVocabulary::marker_bytes(end_id)));
  return Grammar::ref(rule);
}

}  // namespace

std::vector<std::string> reasoning_markers() { return {"<think>", "</think>"}; }

void add_reasoning_prefix(Grammar& g, const ReasoningPrefix& prefix, const TokenVocabulary* vocabulary) {
  if (prefix.end.empty()) throw StructuredError("internal: a reasoning prefix needs an end marker");
  std::optional<int32_t> start_id, end_id;
  if (vocabulary != nullptr) {
    start_id = vocabulary->marker_token(prefix.start);
    end_id = vocabulary->marker_token(prefix.end);
  }
  const bool by_id = start_id && end_id;
  const Sequence reasoning = by_id ? text_through_token(g, *end_id) : text_through(g, prefix.end);
  const Sequence start = by_id ? g.literal(TokenVocabulary::marker_bytes(*start_id)) : g.literal(prefix.start);
  ByteSet space;
  for (char c : std::string(" \t\r\n")) space.set(static_cast<uint8_t>(c));
  const Sequence after = g.repeat(g.bytes(space), 0, 4, "after_reasoning");
  const Sequence block = prefix.starts_inside ? concat({reasoning, after})
                                              : g.optional(concat({start, reasoning, after}), "reasoning");
  const int32_t root = g.add_rule("root_after_reasoning");
  g.add_alternative(root, concat({block, Grammar::ref(g.root())}));
  g.set_root(root);
}

}  // namespace tachyon::structured
