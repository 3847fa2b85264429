#include "tachyon/app/text_stream.h"

#include <algorithm>

namespace tachyon::app {

size_t stop_prefix_overlap(const std::string& text, const std::vector<std::string>& stops) {
  size_t longest = 0;
  for (const std::string& stop : stops) {
    for (size_t k = std::min(stop.size() - 1, text.size()); k > longest; --k) {
      if (text.compare(text.size() - k, k, stop, 0, k) == 0) {
        longest = k;
        break;
      }
    }
  }
  return longest;
}

TextStream::TextStream(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop, bool include_stop_str,
                       bool skip_special_tokens, int32_t min_tokens)
    : detokenizer_(tokenizer, skip_special_tokens),
      stop_(std::move(stop)),
      include_stop_str_(include_stop_str),
      min_tokens_(std::max<int32_t>(min_tokens, 0)) {}

std::string TextStream::push(std::span<const int32_t> token_ids) {
  if (stopped_) return "";
  for (int32_t id : token_ids) {
    held_ += detokenizer_.push(id);
    if (++tokens_pushed_ <= min_tokens_) held_protected_ = held_.size();
  }
  // The earliest stop string wins, wherever it starts in the held text, as long as it ends past
  // the protected text.
  size_t best = std::string::npos;
  for (const std::string& stop : stop_) {
    size_t from = held_protected_ >= stop.size() ? held_protected_ + 1 - stop.size() : 0;
    size_t at = held_.find(stop, from);
    if (at != std::string::npos && (best == std::string::npos || at < best)) {
      best = at;
      matched_stop_ = stop;
    }
  }
  if (best != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, best) + (include_stop_str_ ? matched_stop_ : "");
    held_.clear();
    return release(std::move(out));
  }
  const size_t keep = stop_prefix_overlap(held_, stop_);
  const size_t release_bytes = held_.size() - keep;
  std::string out = held_.substr(0, release_bytes);
  held_.erase(0, release_bytes);
  held_protected_ -= std::min(held_protected_, release_bytes);
  return release(std::move(out));
}

std::string TextStream::finish() {
  if (stopped_) return "";
  held_ += detokenizer_.flush();
  std::string out = std::move(held_);
  held_.clear();
  return release(std::move(out));
}

std::string TextStream::release(std::string text) {
  emitted_ += text;
  return text;
}

}  // namespace tachyon::app
