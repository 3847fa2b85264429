// TextStream: the consumer side of one completion's text. Token ids in, text out: incremental
// detokenization (never half a UTF-8 character) and stop strings. Text that could still turn out
// to be the start of a stop string is held back, so a stop string split across two deltas is
// still caught and never leaks to the client. When a stop string appears, the text before it is
// emitted (with the stop string when include_stop_str_in_output) and the stream reports
// stopped(); the consumer then aborts the sequence in the engine. Runs on consumer threads
// (HTTP handlers, LLM::generate), never on the engine thread.
//
// min_tokens follows vLLM: a stop string counts only when it ends in text decoded from token
// min_tokens + 1 or later, so the first min_tokens tokens are always generated (as EOS and stop
// ids are masked for them). A stop string that starts in that early text and ends after it
// straddles the boundary and counts; one that ends within it is never matched, not even later.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tachyon/tokenizer/incremental_detokenizer.h"
#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::app {

class TextStream {
 public:
  // `tokenizer` must outlive the stream. min_tokens: SamplingParams::min_tokens (see above).
  TextStream(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop, bool include_stop_str,
             bool skip_special_tokens = true, int32_t min_tokens = 0);

  // Text that is now safe to show. Ignores tokens after the stream has stopped.
  std::string push(std::span<const int32_t> token_ids);
  // At the end of the completion: whatever was held back (no stop string can complete now).
  std::string finish();

  bool stopped() const { return stopped_; }
  const std::string& stop_string() const { return matched_stop_; }  // the stop string that matched
  const std::string& text() const { return emitted_; }              // all text emitted so far

 private:
  std::string release(std::string text);

  tokenizer::IncrementalDetokenizer detokenizer_;
  std::vector<std::string> stop_;
  bool include_stop_str_;
  int64_t min_tokens_;
  int64_t tokens_pushed_ = 0;
  std::string held_;            // decoded text not yet emitted
  size_t held_protected_ = 0;   // held_[0, this) is text of the first min_tokens tokens: no stop ends there
  std::string emitted_;
  std::string matched_stop_;
  bool stopped_ = false;
};

// Length of the longest suffix of `text` that is a proper prefix of one of `stops`: the bytes
// that must be held back because a stop string may be completing.
size_t stop_prefix_overlap(const std::string& text, const std::vector<std::string>& stops);

}  // namespace tachyon::app
