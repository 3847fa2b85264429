#include "tachyon/engine/ngram_drafter.h"

#include <algorithm>

#include "tachyon/base/check.h"

namespace tachyon::engine {

std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, const NgramOptions& options) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  // An occurrence of n tokens that ends before the last token: the sequence needs n + 1 of them.
  if (size < int64_t{options.min_n} + 1 || options.num_tokens <= 0) return {};
  const int64_t max_n = std::min<int64_t>(options.max_n, size - 1);
  const int32_t last = tokens[static_cast<size_t>(size - 1)];
  int64_t best_len = 0;
  int64_t best_end = -1;  // index of the last token of the best occurrence
  const int64_t lowest_end = std::max<int64_t>(0, size - 1 - options.window);
  for (int64_t end = size - 2; end >= lowest_end; --end) {
    if (tokens[static_cast<size_t>(end)] != last) continue;
    // Match length backwards from `end` against the suffix; it may overlap the suffix itself.
    const int64_t limit = std::min(max_n, end + 1);
    int64_t len = 1;
    while (len < limit && tokens[static_cast<size_t>(end - len)] == tokens[static_cast<size_t>(size - 1 - len)]) ++len;
    if (len > best_len) {  // strictly longer: among equal lengths the first seen, the most recent, wins
      best_len = len;
      best_end = end;
      if (best_len == max_n) break;
    }
  }
  if (best_len < options.min_n) return {};
  // What followed the occurrence, up to the end of the text; past the end the text is taken to
  // repeat with the period between the occurrence and the suffix (a loop of that period keeps
  // going), so a short loop still gets k drafts instead of one period's worth.
  const int64_t begin = best_end + 1;
  const int64_t period = size - begin;
  std::vector<int32_t> drafts(static_cast<size_t>(options.num_tokens));
  for (int64_t t = 0; t < options.num_tokens; ++t) drafts[static_cast<size_t>(t)] = tokens[static_cast<size_t>(begin + t % period)];
  return drafts;
}

NgramDrafter::NgramDrafter(const NgramOptions& options) : options_(options) {
  TACHYON_CHECK(options.min_n >= 1 && options.min_n <= options.max_n)
      << "n-gram sizes must satisfy 1 <= min " << options.min_n << " <= max " << options.max_n;
  TACHYON_CHECK(options.num_tokens >= 1) << "an n-gram drafter proposes at least one token, got " << options.num_tokens;
  TACHYON_CHECK(options.window >= 1) << "the n-gram search window must hold a token, got " << options.window;
}

std::vector<int32_t> NgramDrafter::propose(int64_t, std::span<const int32_t> tokens) {
  return ngram_lookup(tokens, options_);
}

}  // namespace tachyon::engine
