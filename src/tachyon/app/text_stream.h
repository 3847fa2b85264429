// TextStream: the consumer side of one completion's text. Token ids in, text out: incremental
// detokenization (never half a UTF-8 character) and stop strings. Text that could still turn out
// to be the start of a stop string is held back, so a stop string split across two deltas is
// still caught and never leaks to the client. When a stop string appears, the text before it is
// emitted (with the stop string when include_stop_str_in_output) and the stream reports
// stopped(); the consumer then aborts the sequence in the engine. Runs on consumer threads
// (HTTP handlers, LLM::generate), never on the engine thread.
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
  // `tokenizer` must outlive the stream.
  TextStream(const tokenizer::Tokenizer& tokenizer, std::vector<std::string> stop, bool include_stop_str,
             bool skip_special_tokens = true);

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
  std::string held_;     // decoded text not yet emitted
  std::string emitted_;
  std::string matched_stop_;
  bool stopped_ = false;
};

// Length of the longest suffix of `text` that is a proper prefix of one of `stops`: the bytes
// that must be held back because a stop string may be completing.
size_t stop_prefix_overlap(const std::string& text, const std::vector<std::string>& stops);

}  // namespace tachyon::app
