// Streaming detokenization: ids arrive one at a time, text leaves only as complete UTF-8, and the
// concatenation of every push() and the final flush() equals Tokenizer::decode of all the ids.
// Decoding is context dependent (a byte-level character may span tokens; Llama-2's decoder strips
// the first space of the whole text), so each step decodes a short window that starts at the
// tokens of the previous emission and emits what the window adds beyond that context.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tachyon/tokenizer/tokenizer.h"

namespace tachyon::tokenizer {

class IncrementalDetokenizer {
 public:
  // Keeps a reference: `tokenizer` must outlive this object.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // Text completed by `id`; "" while a character is still incomplete.
  std::string push(int32_t id);
  // Whatever is still held back (an incomplete character decodes to U+FFFD, as decode() does).
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> window_;  // context tokens, then tokens not yet emitted
  std::size_t context_len_ = 0;  // how many of window_ are context
  std::string context_text_;     // decode of the context tokens
};

}  // namespace tachyon::tokenizer
